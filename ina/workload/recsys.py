"""The recommendation model of the model zoo (`ina.workload.zoo`), which no library here
defines: NeuMF, the model of NCF.

NeuMF (He et al., "Neural Collaborative Filtering", WWW 2017, Section 3.4): a generalized
matrix factorization branch (the element-wise product of a user and an item embedding) and
an MLP branch (the concatenated user and item embeddings through a tower of ReLU layers),
concatenated into one logit. Sizes as MLPerf's NCF benchmark on MovieLens-20M trains it
(``--factors 64 --layers 256 256 128 64``): 138,493 users and 26,744 items (the data set's
counts), GMF embeddings of 64, MLP embeddings of 128 (half the first layer, concatenated to
256), MLP layers 256 -> 256 -> 128 -> 64. Parameters:
(138,493 + 26,744) x (64 + 128) + 106,944 (MLP) + 129 (output) = 31,832,577.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

ML20M_USERS = 138_493
ML20M_ITEMS = 26_744


class NeuMF(nn.Module):
    """``(users, items)`` id tensors ``(B,)`` -> one interaction logit per pair ``(B,)``."""

    def __init__(
        self,
        users: int = ML20M_USERS,
        items: int = ML20M_ITEMS,
        factors: int = 64,
        layers: tuple[int, ...] = (256, 256, 128, 64),
    ) -> None:
        super().__init__()
        self.mf_user = nn.Embedding(users, factors)
        self.mf_item = nn.Embedding(items, factors)
        # the MLP's input is the two embeddings side by side: each is half its first width
        self.mlp_user = nn.Embedding(users, layers[0] // 2)
        self.mlp_item = nn.Embedding(items, layers[0] // 2)
        tower: list[nn.Module] = []
        for cin, cout in itertools.pairwise(layers):
            tower += [nn.Linear(cin, cout), nn.ReLU()]
        self.mlp = nn.Sequential(*tower)
        self.out = nn.Linear(factors + layers[-1], 1)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        gmf = self.mf_user(users) * self.mf_item(items)
        mlp = self.mlp(torch.cat([self.mlp_user(users), self.mlp_item(items)], dim=-1))
        return self.out(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)


def ncf() -> NeuMF:
    return NeuMF()
