"""The model zoo: real model definitions turned into `Workload` layer lists on PyTorch's meta
device, so that a 7B-parameter model costs no memory and nothing is downloaded.

`build(name)` instantiates a registered model under ``torch.device("meta")``, runs one
training step on meta tensors (forward, loss, backward) and reads off, per layer:

1. **order**: forward pre-hooks record the order in which modules first run;
2. **gradients**: the module's own parameters (``recurse=False``), in reverse of their
   ``parameters()`` order (autograd produces a module's gradients after those of the
   modules that follow it, and within a module roughly last-used first: the exact order
   within one module does not matter to DDP's buckets, which are cut by sizes). A parameter
   shared by two modules (GPT-2's ``wte`` and ``lm_head``, BERT's word embeddings and MLM
   decoder) counts once, at the first module that runs with it: the embedding;
3. **FLOPs**: one `torch.utils.flop_counter.FlopCounterMode` around the whole step, its
   per-module counts read once after the loss (forward) and once after ``backward()``
   (forward + backward): a second counter around ``backward()`` alone would attribute
   nothing to modules, as its module tracker registers its backward hooks during forward.
   A module's own FLOPs are its count minus its children's, so attention's matmuls sit on
   the attention module while its projections keep their own rows; FLOPs outside the model
   (a loss with matmuls) get a ``loss`` row. The counter counts matmuls and convolutions
   (and attention as the matmuls of its full T x T scores); element-wise work is in the
   byte count;
4. **bytes moved** (for the memory roofline): forward = the module's parameters plus its
   floating-point inputs and outputs, at the precision's bytes per value
   (`ina.workload.layers.PRECISIONS`); backward = twice the forward, an approximation (it
   reads the saved activations and the output gradients and writes the input and weight
   gradients). Integer and boolean tensors (token ids, masks) are not counted.

Precision changes bytes only, never FLOPs. A layer is a module that owns parameters or does
FLOPs of its own; containers without either are left out.

Transformers models (``bert-*``, ``gpt2*``, ``llama-7b``) are built from the library's config
classes only, with an attention implementation registered here that calls PyTorch's
``scaled_dot_product_attention`` with no mask tensor (causal by the module's flag, as the
fused kernels of real training do): transformers' own mask preparation reads tensor values,
which meta tensors do not have.

Every entry names its published parameter count and where it is published; the tests check
the built model against it exactly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn.functional import binary_cross_entropy_with_logits, cross_entropy
from torch.utils.flop_counter import FlopCounterMode

from ina.workload import recsys, vision
from ina.workload.layers import PRECISIONS, Layer, Workload, check_precision, kind_of

META = torch.device("meta")
ATTENTION = "ina_sdpa_unmasked"  # the attention implementation registered for meta builds

# A step: (model, batch, sequence length or None) -> the loss, on meta tensors.
Step = Callable[[nn.Module, int, "int | None"], torch.Tensor]


@dataclass(frozen=True)
class Entry:
    """A registered model: how to build it and one step of it, and what it should be.

    ``params``: the published parameter count (for figures published rounded, the exact
    count of the reference implementation), and ``published`` where it is; ``batch_size``:
    the default batch per worker; ``seq_len``: the default sequence length of a language
    model (None otherwise), at most ``max_seq_len``; ``definition``: what defines it, for
    the workload's source line."""

    name: str
    description: str
    params: int
    published: str
    batch_size: int
    make: Callable[[], nn.Module]
    step: Step
    definition: str
    seq_len: int | None = None
    max_seq_len: int | None = None
    blocks: str | None = None  # path of a ModuleList of identical blocks (`profile`)


def _meta_ids(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.long, device=META)


def _token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def image_step(shape: tuple[int, ...]) -> Step:
    """Classification of ``(B, *shape)`` inputs, cross-entropy on the logits."""

    def step(model: nn.Module, batch: int, seq_len: int | None) -> torch.Tensor:
        x = torch.empty((batch, *shape), device=META)
        return cross_entropy(model(x), _meta_ids((batch,)))

    return step


def token_step(model: nn.Module, batch: int, seq_len: int | None) -> torch.Tensor:
    """Next-token prediction over ids ``(B, L)`` by a plain module: logits ``(B, L, V)``."""
    ids = _meta_ids((batch, seq_len or 1))
    return _token_loss(model(ids), ids)


def causal_lm_step(model: nn.Module, batch: int, seq_len: int | None) -> torch.Tensor:
    """A transformers causal language model: cross-entropy of the logits at every position."""
    ids = _meta_ids((batch, seq_len or 1))
    return _token_loss(model(input_ids=ids).logits, ids)


def bert_step(model: nn.Module, batch: int, seq_len: int | None) -> torch.Tensor:
    """BERT pre-training: masked-LM cross-entropy plus next-sentence prediction. The MLM head
    computes logits at every position (the loss picks the masked 15 %), so the FLOPs are
    those of the full head, as in BERT's own implementation."""
    ids = _meta_ids((batch, seq_len or 1))
    out = model(input_ids=ids)
    return _token_loss(out.prediction_logits, ids) + cross_entropy(
        out.seq_relationship_logits, _meta_ids((batch,))
    )


def ncf_step(model: nn.Module, batch: int, seq_len: int | None) -> torch.Tensor:
    """NCF: a logit per (user, item) pair, binary cross-entropy against implicit feedback."""
    users, items = _meta_ids((batch,)), _meta_ids((batch,))
    labels = torch.empty(batch, device=META)
    return binary_cross_entropy_with_logits(model(users, items), labels)


class WordLSTM(nn.Module):
    """Word-level LSTM language model: ids ``(B, L)`` -> next-word logits ``(B, L, V)``
    (Zaremba et al.'s PTB models: embedding, stacked LSTM, untied linear decoder)."""

    def __init__(self, vocab: int, embed: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(x))
        return self.decoder(out)


@functools.cache
def _transformers():
    """transformers, imported on first use (it takes seconds), with the unmasked attention
    registered (see the module docstring)."""
    import transformers
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    transformers.AttentionInterface.register(ATTENTION, sdpa_attention_forward)
    return transformers


def _gpt2(
    n_embd: int, n_layer: int, n_head: int, n_positions: int = 1024, vocab: int = 50257
) -> Callable[[], nn.Module]:
    """GPT-2's blocks at a shape (GPT-2's context and vocabulary unless given)."""

    def make() -> nn.Module:
        tf = _transformers()
        config = tf.GPT2Config(
            n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_positions=n_positions,
            vocab_size=vocab, bos_token_id=min(50256, vocab - 1),
            eos_token_id=min(50256, vocab - 1), use_cache=False, attn_implementation=ATTENTION,
        )  # fmt: skip
        return tf.GPT2LMHeadModel(config)

    return make


def _bert(hidden: int, layers: int, heads: int) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        tf = _transformers()
        config = tf.BertConfig(
            hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=4 * hidden, attn_implementation=ATTENTION,
        )  # fmt: skip
        return tf.BertForPreTraining(config)

    return make


def _llama(hidden: int, layers: int, heads: int, kv: int, ffn: int) -> Callable[[], nn.Module]:
    """A Llama 2 model of the given shape (the model cards' config.json settings)."""

    def make() -> nn.Module:
        tf = _transformers()
        config = tf.LlamaConfig(
            hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
            num_key_value_heads=kv, intermediate_size=ffn, vocab_size=32000,
            max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
            use_cache=False, attn_implementation=ATTENTION,
        )  # fmt: skip
        return tf.LlamaForCausalLM(config)

    return make


def _mixtral_8x7b() -> nn.Module:
    tf = _transformers()
    # Mixtral 8x7B (Jiang et al. 2024; the model card's config.json): 32 blocks of hidden
    # 4,096 with 8 experts of FFN 14,336 each, two per token. transformers' batched experts
    # gather each token's two experts' weights, so the FLOP counter counts the routed work
    # (its per-expert loop needs data-dependent shapes the meta device cannot give)
    config = tf.MixtralConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, num_local_experts=8,
        num_experts_per_tok=2, vocab_size=32000, max_position_embeddings=32768,
        rms_norm_eps=1e-5, rope_theta=1e6, tie_word_embeddings=False, use_cache=False,
        attn_implementation=ATTENTION, experts_implementation="batched_mm",
    )  # fmt: skip
    return tf.MixtralForCausalLM(config)


def _ptb_large() -> nn.Module:
    return WordLSTM(vocab=10_000, embed=1500, hidden=1500, layers=2)


# The project's trainable models (`ina.workload.models`) on their data sets, by zoo name:
# (data set, model, published count, where).
TRAINABLE = {
    # 64 -> 128 -> 10: 64 x 128 + 128 + 128 x 10 + 10
    "digits-mlp": ("digits", "mlp", 9_610, "ina.workload.models: one hidden layer of 128"),
    "mnist1d-cnn1d": ("mnist1d", "cnn1d", 25_162, "ina.workload.models docstring"),
    "pytext-char_lstm": ("pytext", "char_lstm", 98_722, "ina.workload.models docstring"),
    # He et al. 2016 (Section 4.2, Table 6) give 0.27M for ResNet-20 with identity
    # shortcuts; this one's 1x1 projection shortcuts on the two downsampling blocks add
    # 16x32 + 32x64 weights and their batch norms: 272,474 in all
    "cifar10-resnet20": ("cifar10", "resnet", 272_474, "He et al. 2016 (0.27M), exact here"),
}


BERT_BLOCKS, GPT2_BLOCKS = "bert.encoder.layer", "transformer.h"

# Default batches per worker (the user's to change): a published global batch over a typical
# number of data-parallel workers where one is published, else a common per-GPU setting.
# ImageNet CNNs 64 (a common per-GPU batch); BERT 32 x 128 tokens (BERT's 256 sequences over
# 8 workers), BERT-large 8; GPT-2 8 x 1024 (GPT-2's 512 sequences over 64 workers), GPT-2 XL
# 1; Llama 2 7B 1 x 4096 (its 4M-token batch over 1,024 GPUs); NCF 65,536 (MLPerf's
# 1,048,576 over 16 workers); PTB 20 x 35 (Zaremba et al.'s minibatch and unroll).

ENTRIES: dict[str, Entry] = {
    e.name: e
    for e in (
        # Vision: counts as torchvision's model table lists them (exact counts of the
        # papers' networks; the papers round them: ResNet-50 25.6M, VGG-16 138M).
        Entry("resnet50", "ResNet-50 on ImageNet 224x224 (He et al. 2016)", 25_557_032,
              "He et al. 2016 (25.6M); exact count of torchvision's resnet50",
              64, vision.resnet50, image_step(vision.IMAGE_SHAPE), "ina.workload.vision.ResNet"),
        Entry("resnet101", "ResNet-101 on ImageNet 224x224 (He et al. 2016)", 44_549_160,
              "He et al. 2016 (44.5M); exact count of torchvision's resnet101",
              64, vision.resnet101, image_step(vision.IMAGE_SHAPE), "ina.workload.vision.ResNet"),
        Entry("vgg16", "VGG-16 (configuration D) on ImageNet 224x224", 138_357_544,
              "Simonyan and Zisserman 2015, Table 2 (138M); exact count of torchvision's vgg16",
              64, vision.vgg16, image_step(vision.IMAGE_SHAPE), "ina.workload.vision.VGG"),
        Entry("vgg19", "VGG-19 (configuration E) on ImageNet 224x224", 143_667_240,
              "Simonyan and Zisserman 2015, Table 2 (144M); exact count of torchvision's vgg19",
              64, vision.vgg19, image_step(vision.IMAGE_SHAPE), "ina.workload.vision.VGG"),
        # BERT with its pre-training heads (MLM, tied to the word embeddings, and NSP):
        # Devlin et al. 2019 give 110M and 340M; these are the exact counts of transformers'
        # BertForPreTraining (BertModel alone, with the pooler: 109,482,240 and 335,141,888)
        Entry("bert-base", "BERT-base pre-training (MLM + NSP), 12 x 768", 110_106_428,
              "Devlin et al. 2019 (110M); exact count of transformers' BertForPreTraining",
              32, _bert(768, 12, 12), bert_step, "transformers BertConfig", 128, 512,
              BERT_BLOCKS),
        Entry("bert-large", "BERT-large pre-training (MLM + NSP), 24 x 1024", 336_226_108,
              "Devlin et al. 2019 (340M); exact count of transformers' BertForPreTraining",
              8, _bert(1024, 24, 16), bert_step, "transformers BertConfig", 128, 512,
              BERT_BLOCKS),
        # GPT-2 with the output layer tied to the token embeddings (counted once)
        Entry("gpt2", "GPT-2 small (124M), causal LM over 1024 tokens", 124_439_808,
              "Radford et al. 2019 (117M as first reported); 124M on the model card: exact "
              "count of transformers' GPT2LMHeadModel", 8, _gpt2(768, 12, 12),
              causal_lm_step, "transformers GPT2Config", 1024, 1024, GPT2_BLOCKS),
        Entry("gpt2-xl", "GPT-2 XL (1.5B), causal LM over 1024 tokens", 1_557_611_200,
              "Radford et al. 2019 (1542M); exact count of transformers' GPT2LMHeadModel",
              1, _gpt2(1600, 48, 25), causal_lm_step, "transformers GPT2Config", 1024, 1024,
              GPT2_BLOCKS),
        Entry("llama-7b", "Llama 2 7B, causal LM over 4096 tokens", 6_738_415_616,
              "Llama-2-7b model card (7B); exact count of the published checkpoint",
              1, _llama(4096, 32, 32, 32, 11008), causal_lm_step, "transformers LlamaConfig",
              4096, 4096,
              "model.layers"),
        Entry("llama-13b", "Llama 2 13B, causal LM over 4096 tokens", 13_015_864_320,
              "Llama-2-13b model card (13B); exact count of the published checkpoint",
              1, _llama(5120, 40, 40, 40, 13824), causal_lm_step, "transformers LlamaConfig",
              4096, 4096, "model.layers"),
        Entry("llama-70b", "Llama 2 70B (grouped-query attention), causal LM over 4096 "
              "tokens", 68_976_648_192,
              "Llama-2-70b model card (70B); exact count of the published checkpoint",
              1, _llama(8192, 80, 64, 8, 28672), causal_lm_step, "transformers LlamaConfig",
              4096, 4096, "model.layers"),
        # GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12,288, 96 heads, a
        # context of 2,048, GPT-2's vocabulary; dense attention in every layer (the paper
        # alternates dense and locally banded sparse patterns, which change no parameter)
        Entry("gpt3-175b", "GPT-3 175B, causal LM over 2048 tokens", 174_604_259_328,
              "Brown et al. 2020, Table 2.1 (175.0B); exact count of this configuration",
              1, _gpt2(12288, 96, 96, 2048), causal_lm_step, "transformers GPT2Config", 2048,
              2048, GPT2_BLOCKS),
        Entry("mixtral-8x7b", "Mixtral 8x7B (8 experts, 2 per token), causal LM over 4096 "
              "tokens", 46_702_792_704,
              "Mixtral-8x7B model card (46.7B); exact count of the published checkpoint",
              1, _mixtral_8x7b, causal_lm_step, "transformers MixtralConfig", 4096, 32768,
              "model.layers"),
        Entry("ncf", "NeuMF (NCF) on MovieLens-20M, MLPerf's sizes", 31_832_577,
              "He et al. 2017 with MLPerf's ml-20m sizes: derived in ina.workload.recsys",
              65_536, recsys.ncf, ncf_step, "ina.workload.recsys.NeuMF"),
        Entry("ptb-lstm", "Zaremba et al.'s large PTB LSTM (2 x 1500), unrolled 35 steps",
              66_034_000, "Zaremba et al. 2014 (66M); exact with two LSTM biases per gate",
              20, _ptb_large, token_step, "ina.workload.zoo.WordLSTM", 35),
    )
}  # fmt: skip


def _trainable_entry(name: str, dataset: str, model: str, params: int, published: str) -> Entry:
    from ina.workload.catalog import TASKS
    from ina.workload.data import SHAPES
    from ina.workload.models import build_model

    shape, classes = SHAPES[dataset]
    text = TASKS[dataset].kind == "text"
    return Entry(
        name,
        f"the trainer's {model} on {dataset}",
        params,
        published,
        32,  # `ina train`'s default --batch-size
        lambda: build_model(model, shape, classes),
        token_step if text else image_step(shape),
        f"ina.workload.models {model}",
        shape[0] if text else None,
        shape[0] if text else None,
    )


ENTRIES.update((name, _trainable_entry(name, *spec)) for name, spec in TRAINABLE.items())
NAMES = tuple(ENTRIES)


GPT_SHAPE = "gpt:LAYERS:HIDDEN:HEADS[:SEQ[:VOCAB]]"


def entry(name: str) -> Entry:
    """A registered model, or a GPT of a given shape (`GPT_SHAPE`)."""
    if name.startswith("gpt:"):
        return gpt_shape(name)
    try:
        return ENTRIES[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; known: {', '.join(NAMES)} or {GPT_SHAPE}"
        ) from None


@functools.lru_cache(maxsize=32)
def gpt_shape(name: str) -> Entry:
    """A GPT of the shape ``gpt:LAYERS:HIDDEN:HEADS[:SEQ[:VOCAB]]`` (sequence 2048 and
    Megatron-LM's padded vocabulary of 51,200 unless given): how papers state the models they
    train (Narayanan et al. 2021, Table 1). GPT-2's blocks (GELU MLP of 4 x hidden, learned
    positions, the head tied to the embedding); its count is this configuration's own."""
    parts = name.split(":")[1:]
    try:
        nums = [int(x) for x in parts]
    except ValueError:
        nums = []
    if not 3 <= len(nums) <= 5 or min(nums) < 1 or nums[1] % nums[2]:
        raise ValueError(f"--workload {name!r}: use {GPT_SHAPE} (HIDDEN a multiple of HEADS)")
    layers, hidden, heads, seq, vocab = (*nums, 2048, 51200)[:5]
    return Entry(name, f"GPT, {layers} x {hidden}, {heads} heads", 0, "its shape", 1,
                 _gpt2(hidden, layers, heads, seq, vocab), causal_lm_step,
                 "transformers GPT2Config", seq, seq, GPT2_BLOCKS)  # fmt: skip


def build(
    name: str, batch_size: int | None = None, precision: str = "fp32", seq_len: int | None = None
) -> Workload:
    """The workload of zoo model ``name``: one worker's step at ``batch_size`` (default: the
    entry's), ``precision`` and, for language models, ``seq_len`` (default: the entry's).
    ValueError with a one-line reason for an unknown name, a batch size below 1, an unknown
    precision or a sequence length the model does not take. Workloads are frozen, so the
    same arguments return the same object (kept in memory, never on disk)."""
    return _cached(*_arguments(name, batch_size, precision, seq_len))


def measure(
    name: str,
    batch_size: int | None = None,
    precision: str = "fp32",
    seq_len: int | None = None,
    *,
    fold_blocks: bool = True,
) -> Workload:
    """`build` without the cache (what `ina bench zoo` times). ``fold_blocks``: run two of a
    transformer's identical blocks and copy the second's rows for the rest (`profile`);
    False runs every block (the tests check that both give the same rows)."""
    e, batch, precision, length = _arguments(name, batch_size, precision, seq_len)
    with META:
        model = e.make()
    step = functools.partial(e.step, batch=batch, seq_len=length)
    layers, notes = profile(model, step, precision, e.blocks if fold_blocks else None)
    config = getattr(model, "config", None)
    return Workload(
        name=e.name,
        layers=layers,
        samples=batch,
        precision=precision,
        tokens_per_sample=length or 1,
        hidden=int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0) or 0),
        blocks=len(model.get_submodule(e.blocks)) if e.blocks else 0,
        experts=int(getattr(config, "num_local_experts", 0) or 0),
        top_k=int(getattr(config, "num_experts_per_tok", 0) or 0),
        source=f"zoo: {e.definition} (meta device), FLOPs by torch.utils.flop_counter",
        notes=notes,
    )


def _arguments(
    name: str, batch_size: int | None, precision: str, seq_len: int | None
) -> tuple[Entry, int, str, int | None]:
    """The entry and the checked batch size, precision and sequence length (defaults filled)."""
    e = entry(name)
    check_precision(precision)
    batch = e.batch_size if batch_size is None else batch_size
    if batch < 1:
        raise ValueError(f"the batch size must be >= 1, got {batch}")
    if seq_len is not None and e.seq_len is None:
        raise ValueError(f"{name} is not a language model: it takes no sequence length")
    length = e.seq_len if seq_len is None else seq_len
    if length is not None and not 1 <= length <= (e.max_seq_len or length):
        raise ValueError(f"{name} takes sequence lengths 1 to {e.max_seq_len}, got {length}")
    return e, batch, precision, length


@functools.lru_cache(maxsize=64)
def _cached(e: Entry, batch: int, precision: str, seq_len: int | None) -> Workload:
    return measure(e.name, batch, precision, seq_len)


@functools.lru_cache(maxsize=32)
def trainable(dataset: str, model: str, batch_size: int, precision: str = "fp32") -> Workload:
    """The workload of `ina train`'s ``model`` on ``dataset`` (any pair the trainer accepts,
    `ina.workload.catalog.resolve`), at ``batch_size`` per worker: what the simulator's real
    training reads per-layer FLOPs from. Kept per process: counting the character LSTM's
    FLOPs takes about 2 s, and a sweep process or a test session starts many runs of it."""
    from ina.workload.catalog import resolve

    w = resolve(dataset, model)
    check_precision(precision)
    if batch_size < 1:
        raise ValueError(f"the batch size must be >= 1, got {batch_size}")
    e = _trainable_entry(w.name, w.dataset, w.model, 0, "")
    with META:
        net = e.make()
    step = functools.partial(e.step, batch=batch_size, seq_len=e.seq_len)
    layers, notes = profile(net, step, precision)
    return Workload(
        name=w.name,
        layers=layers,
        samples=batch_size,
        precision=precision,
        tokens_per_sample=e.seq_len or 1,
        source=f"zoo: {e.definition} (meta device), FLOPs by torch.utils.flop_counter",
        notes=notes,
    )


def _floats(x: object) -> int:
    """Elements of the floating-point tensors in ``x`` (tensors, sequences, mappings)."""
    if isinstance(x, torch.Tensor):
        return x.numel() if x.is_floating_point() else 0
    if isinstance(x, (list, tuple)):
        return sum(_floats(v) for v in x)
    if isinstance(x, dict):  # transformers' ModelOutput is a dict too
        return sum(_floats(v) for v in x.values())
    return 0


def _sums(counter: FlopCounterMode) -> dict[str, int]:
    return {k: sum(ops.values()) for k, ops in counter.get_flop_counts().items()}


def profile(
    model: nn.Module,
    step: Callable[[nn.Module], torch.Tensor],
    precision: str,
    blocks: str | None = None,
) -> tuple[tuple[Layer, ...], tuple[str, ...]]:
    """The layers of one training step of ``model`` (on the meta device): ``step(model)``
    runs the forward pass and returns the loss; see the module docstring for what is counted.
    Also returns notes on anything unusual (parameters no forward pass used).

    ``blocks``: the path of a ModuleList of identical blocks (a transformer's layers). Meta
    tensors cost no arithmetic, but every operator still costs Python dispatch (a 32-block
    Llama step is about 8,000 of them): only the first two blocks run, the two are checked
    to give the same rows, and the second's rows are copied, renamed, for the others."""
    if blocks is None:
        return _profile(model, step, precision)
    parent_path, _, attr = blocks.rpartition(".")
    parent = model.get_submodule(parent_path)
    full = getattr(parent, attr)
    if len(full) <= 2:
        return _profile(model, step, precision)
    setattr(parent, attr, nn.ModuleList(full[:2]))
    try:
        rows, notes = _profile(model, step, precision)
    finally:
        setattr(parent, attr, full)
    first, second = f"{blocks}.0.", f"{blocks}.1."
    block0 = [r for r in rows if r.name.startswith(first)]
    block1 = [r for r in rows if r.name.startswith(second)]
    if [replace(r, name=r.name.replace(first, second, 1)) for r in block0] != block1:
        raise RuntimeError(f"the blocks of {blocks} are not identical: profile them all")
    end = rows.index(block1[-1]) + 1
    copies = [
        replace(r, name=r.name.replace(second, f"{blocks}.{i}.", 1))
        for i in range(2, len(full))
        for r in block1
    ]
    return (*rows[:end], *copies, *rows[end:]), notes


def _profile(
    model: nn.Module, step: Callable[[nn.Module], torch.Tensor], precision: str
) -> tuple[tuple[Layer, ...], tuple[str, ...]]:
    bpv = PRECISIONS[check_precision(precision)]
    paths = {m: path for path, m in model.named_modules()}
    order: list[nn.Module] = []  # modules in the order they first ran
    activations: dict[nn.Module, int] = {}  # floating-point inputs + outputs, all calls
    calls: list[tuple[nn.Module, int]] = []  # modules running now, with their first node
    spans: list[tuple[int, int, nn.Module]] = []  # autograd nodes made in each call
    probe = torch.zeros((), device=META, requires_grad=True)

    def node_number() -> int:
        """The sequence number the next autograd node will get (a probe node takes one)."""
        return (probe * 1).grad_fn._sequence_nr() + 1

    def pre(m: nn.Module, args: object) -> None:
        if m not in activations:
            activations[m] = 0
            order.append(m)
        calls.append((m, node_number()))

    def post(m: nn.Module, args: object, kwargs: object, out: object) -> None:
        activations[m] += _floats(args) + _floats(kwargs) + _floats(out)
        m0, first = calls.pop()
        spans.append((first, node_number(), m0))

    handles = []
    for m in paths:
        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post, with_kwargs=True))
    counter = FlopCounterMode(display=False)
    try:
        with counter:
            loss = step(model)
            fwd = _sums(counter)
            for h in handles:
                h.remove()
            bwd = _backward_by_module(loss, counter, spans)
    finally:
        for h in handles:
            h.remove()
    total_bwd = counter.get_total_flops() - fwd.get("Global", 0)
    if sum(bwd.values()) != total_bwd:  # every backward FLOP lands on one module or None
        raise RuntimeError(f"backward FLOPs attributed {sum(bwd.values())} != {total_bwd}")

    root = type(model).__name__

    def key(m: nn.Module) -> str:
        return f"{root}.{paths[m]}" if paths[m] else root

    def below(m: nn.Module) -> int:
        """Forward FLOPs of the nearest descendants of ``m`` that ran (a container that
        never runs itself, such as a ModuleList of blocks, is looked through)."""
        return sum(fwd.get(key(c), 0) if c in activations else below(c) for c in m.children())

    counted: set[int] = set()  # ids of parameters already given to a layer

    def layer(m: nn.Module, name: str) -> Layer | None:
        params = list(m.parameters(recurse=False))
        mine = [p for p in params if id(p) not in counted]
        counted.update(id(p) for p in mine)
        f = fwd.get(key(m), 0) - below(m)
        b = bwd.get(m, 0)
        if not mine and not f and not b:
            return None
        moved = (sum(p.numel() for p in params) + activations.get(m, 0)) * bpv
        return Layer(
            name=name,
            grads=tuple(p.numel() for p in reversed(mine)),
            fwd_flops=float(f),
            bwd_flops=float(b),
            fwd_bytes=float(moved),
            bwd_bytes=float(2 * moved),
            kind=_kind(m),
        )

    rows = [x for m in order if (x := layer(m, paths[m] or root)) is not None]
    notes: list[str] = []
    unused = [m for m in paths if m not in activations and any(
        id(p) not in counted for p in m.parameters(recurse=False))]  # fmt: skip
    for m in unused:  # parameters but no forward: rows at the end, no work
        if (x := layer(m, paths[m])) is not None:
            rows.append(x)
    if unused:
        notes.append(f"{len(unused)} modules with parameters never ran in the forward pass")
    outside_f = fwd.get("Global", 0) - fwd.get(root, 0)
    outside_b = bwd.get(None, 0)
    if outside_f or outside_b:
        rows.append(Layer("loss", (), float(outside_f), float(outside_b)))
    return tuple(rows), tuple(notes)


def _kind(m: nn.Module) -> str:
    """The layer's kind (`ina.workload.layers.KINDS`); 3x3 stride-1 dense 2-D convolutions
    apart, the ones cuDNN can run by Winograd's algorithm."""
    kind = kind_of(type(m).__name__)
    if (
        isinstance(m, nn.Conv2d)
        and m.kernel_size == (3, 3)
        and m.stride == (1, 1)
        and m.groups == 1
        and m.dilation == (1, 1)
    ):
        return "conv3x3"
    return kind


def _backward_by_module(
    loss: torch.Tensor, counter: FlopCounterMode, spans: list[tuple[int, int, nn.Module]]
) -> dict[nn.Module | None, int]:
    """Run ``loss.backward()`` and give each backward FLOP to the module whose forward made
    the autograd node that ran it (None: made outside every module, as the loss is).

    The flop counter's own module tracker places backward FLOPs by hooks on module inputs
    and outputs, which misplaces them when modules share an input (Llama's q, k and v
    projections read the same tensor: their backward overlapped and went to all three).
    Here each autograd node is mapped to the innermost module that was running when it was
    made (``spans`` are in the order calls finished, so inner calls come first), and a hook
    before each node moves the counter's running total to the module of the node before."""
    owner: dict[int, nn.Module] = {}
    for first, end, m in spans:
        for n in range(first, end):
            owner.setdefault(n, m)
    flops: dict[nn.Module | None, int] = {}
    state: dict[str, object] = {"module": None, "total": counter.get_total_flops()}

    def enter(module: nn.Module | None, grad_outputs: object) -> None:
        now = counter.get_total_flops()
        flops[state["module"]] = flops.get(state["module"], 0) + now - state["total"]
        state["module"], state["total"] = module, now

    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        node.register_prehook(functools.partial(enter, owner.get(node._sequence_nr())))
        stack.extend(f for f, _ in node.next_functions)
    loss.backward()
    enter(None, None)
    return flops
