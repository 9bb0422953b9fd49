"""The order in which BMv2 sends a multicast group's copies, and why (issue 32).

BMv2 replicates a packet to a group by walking the group's L1 nodes in the order they were
attached (a vector: attach appends, detach erases in place), and each node's ports in
ascending order. With PI's P4Runtime server in front (``simple_switch_grpc``), who attaches
what, and when, is PI's pre_mc_mgr:

1. A group's replicas become one node per replica id (rid), kept in a
   ``std::unordered_map<RId, Node>`` filled in the order the request lists its replicas
   (a rid listed again adds a port to the same node).
2. INSERT creates the group and then creates and attaches one node per rid *while iterating
   that map*: the attach order is the map's iteration order.
3. MODIFY builds a fresh map from the request, iterates it, and for each rid keeps the old
   node where it is (changing its ports in place) or creates and attaches a new one, at the
   end. Old nodes the request no longer lists are detached afterwards.
4. DELETE detaches everything; an INSERT after it starts again from (2).

So the order is libstdc++'s iteration order of ``unordered_map<uint16_t, ...>`` (GCC 12,
the compiler of Debian 12's BMv2 packages), which `UnorderedMapOrder` models:

- ``std::hash`` of an integer is the integer, and a key lives in bucket ``key % buckets``.
- The nodes form one singly linked list in which each bucket's nodes are contiguous. A node
  for an empty bucket goes to the front of the list; a node for a bucket that has nodes
  goes first among them (after the node before that bucket's run).
- An empty map has one bucket and a resize threshold of 0. An insert that would take the
  element count above the threshold asks for at least ``max(count, 11 on the very first
  insert) + 1`` and at least twice the current buckets; the bucket count is then the first
  prime of libstdc++'s list that is not smaller, except that counts below 14 come from a
  small table (so the first insert gives 13 buckets). The threshold becomes the bucket count
  (max_load_factor is 1). A rehash walks the old list in order and re-links every node by
  the same rule as an insert, into the new buckets; the insert that caused it follows.

Consequences: a group of up to 13 replicas inserted in ascending rid order leaves in
descending order; 14 replicas (0..13) leave as 13, 0, 1, ..., 12 (the rehash to 29 buckets
reverses the first 13); a MODIFY never reorders the nodes it keeps.

`McastGroup` is what `ina.switch_model.tables.Tables` keeps per group: the replicas as last
written (a plain list for everyone who reads it) plus the attach order that the write
history gave. `send_order` is the order of the copies; a plain list of replicas counts as
one INSERT in its order.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Iterator, Sequence

Replica = tuple[int, int]  # (egress port, rid)

# libstdc++'s bucket counts (src/shared/hashtable-aux.cc, __prime_list), as far as a map of
# 16-bit keys can grow: 65,536 keys reach 85,229 buckets (13, 29, 59, 127, 257, 541, 1109,
# 2357, 5087, 10273, 20753, 42043, 85229); the next prime is kept as the upper end.
_PRIMES = (
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89,
    97, 103, 109, 113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277,
    293, 313, 337, 359, 383, 409, 439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887, 953,
    1031, 1109, 1193, 1289, 1381, 1493, 1613, 1741, 1879, 2029, 2179, 2357, 2549, 2753, 2971,
    3209, 3469, 3739, 4027, 4349, 4703, 5087, 5503, 5953, 6427, 6949, 7517, 8123, 8783, 9497,
    10273, 11113, 12011, 12983, 14033, 15173, 16411, 17749, 19183, 20753, 22447, 24281, 26267,
    28411, 30727, 33223, 35933, 38873, 42043, 45481, 49201, 53201, 57557, 62233, 67307, 72817,
    78779, 85229, 92203,
)  # fmt: skip
_SEARCH_FROM = 6  # _M_next_bkt searches the list from its 7th prime (17) ...
_SMALL = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)  # ... and looks smaller counts up here
_FIRST_ALLOCATION = 11  # the first insert allocates buckets for at least this many elements
_GROWTH = 2  # a rehash at least doubles the bucket count (_S_growth_factor)
MAX_KEY = 0xFFFF  # v1model's egress_rid is bit<16>


def _next_buckets(n: int) -> int:
    """The bucket count libstdc++ picks for a request of at least ``n`` (n > 0)."""
    if n < len(_SMALL):
        return _SMALL[n]
    i = bisect.bisect_left(_PRIMES, n, _SEARCH_FROM)
    if i >= len(_PRIMES) - 1:  # cannot happen for 16-bit keys (see _PRIMES)
        raise ValueError(f"{n} buckets: beyond what a map of 16-bit keys reaches")
    return _PRIMES[i]


class UnorderedMapOrder:
    """Iteration order of a libstdc++ ``std::unordered_map<uint16_t, T>`` that is only
    inserted into (PI never erases from a group's map: a MODIFY builds a new one).

    The linked list is kept as its runs: ``_runs`` maps each bucket with nodes to its keys,
    oldest first, and its own order is the order in which the buckets got their first node.
    A new bucket's run goes to the front of the list and a new key to the front of its run,
    so iteration walks both backwards.
    """

    def __init__(self, keys: Iterable[int] = ()) -> None:
        self.bucket_count = 1  # an empty map's single bucket
        self._next_resize = 0  # 0: nothing allocated yet
        self._runs: dict[int, list[int]] = {}
        self._keys: set[int] = set()
        for key in keys:
            self.insert(key)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[int]:
        for bucket in reversed(self._runs):
            yield from reversed(self._runs[bucket])

    def insert(self, key: int) -> bool:
        """Insert ``key`` (``map[key]``); False if it is there already (nothing moves)."""
        if not 0 <= key <= MAX_KEY:
            raise ValueError(f"key {key} is not a 16-bit replica id")
        if key in self._keys:
            return False
        grow = self._rehash_to(len(self._keys), 1)
        if grow:
            runs: dict[int, list[int]] = {}
            for old in self:  # re-linked in the old list's order, by the insert rule
                runs.setdefault(old % grow, []).append(old)
            self._runs, self.bucket_count = runs, grow
        self._runs.setdefault(key % self.bucket_count, []).append(key)
        self._keys.add(key)
        return True

    def _rehash_to(self, elements: int, inserting: int) -> int:
        """The new bucket count if inserting ``inserting`` more elements rehashes, else 0
        (_Prime_rehash_policy::_M_need_rehash with max_load_factor 1)."""
        wanted = elements + inserting
        if wanted <= self._next_resize:
            return 0
        least = max(wanted, 0 if self._next_resize else _FIRST_ALLOCATION)
        if least >= self.bucket_count:
            buckets = _next_buckets(max(least + 1, self.bucket_count * _GROWTH))
            self._next_resize = buckets
            return buckets
        self._next_resize = self.bucket_count
        return 0


def insert_order(rids: Iterable[int]) -> list[int]:
    """The rids of a group INSERTed with replicas of ``rids`` (in the request's order), in
    the order BMv2 attaches their nodes."""
    return list(UnorderedMapOrder(rids))


def modify_order(attached: Sequence[int], rids: Iterable[int]) -> list[int]:
    """The attach order after a MODIFY whose replicas have ``rids``: the kept nodes where
    they were in ``attached``, the removed ones gone, the new ones appended in the order of
    the request's map."""
    new = insert_order(rids)
    wanted, old = set(new), set(attached)
    return [r for r in attached if r in wanted] + [r for r in new if r not in old]


class McastGroup(list):
    """One multicast group: its replicas (egress port, rid) as the controller last wrote
    them (a list, so reads, comparisons and copies see exactly that) and ``nodes``, the rids
    in the order BMv2 attached their nodes, which the group's write history decided.
    Build it with `insert_group` and `modify_group`; it pickles with its ``nodes``."""

    nodes: tuple[int, ...]

    def __init__(self, replicas: Iterable[Replica] = (), nodes: Iterable[int] | None = None):
        super().__init__(replicas)
        rids = [rid for _, rid in self]
        self.nodes = tuple(insert_order(rids) if nodes is None else nodes)
        if len(self.nodes) != len(set(rids)) or set(self.nodes) != set(rids):
            raise ValueError(f"nodes {self.nodes} are not the rids of the replicas {list(self)}")


def insert_group(replicas: Iterable[Replica]) -> McastGroup:
    """A group as an INSERT with ``replicas`` (in this order) leaves it on BMv2."""
    return McastGroup(replicas)


def modify_group(old: Sequence[Replica], replicas: Iterable[Replica]) -> McastGroup:
    """Group ``old`` after a MODIFY to ``replicas``, as BMv2 (behind PI) leaves it."""
    replicas = list(replicas)
    return McastGroup(replicas, modify_order(attach_order(old), (rid for _, rid in replicas)))


def attach_order(replicas: Sequence[Replica]) -> tuple[int, ...]:
    """The rids of a group's nodes in attach order: a `McastGroup`'s own, or, for a plain
    sequence (a group written straight into the tables), as one INSERT in its order."""
    return _attach_order(tuple(replicas), getattr(replicas, "nodes", None))


def send_order(replicas: Sequence[Replica]) -> list[Replica]:
    """The copies of a multicast to this group, (egress port, rid), in the order BMv2 sends
    them: node by node in attach order, each node's ports ascending."""
    return list(_send_order(tuple(replicas), getattr(replicas, "nodes", None)))


@functools.lru_cache(maxsize=1024)
def _attach_order(replicas: tuple[Replica, ...], nodes: tuple[int, ...] | None) -> tuple[int, ...]:
    rids = {rid for _, rid in replicas}
    if nodes is None or len(nodes) != len(rids) or set(nodes) != rids:
        return tuple(insert_order(rid for _, rid in replicas))  # not a McastGroup's (any more)
    return nodes


@functools.lru_cache(maxsize=1024)
def _send_order(
    replicas: tuple[Replica, ...], nodes: tuple[int, ...] | None
) -> tuple[Replica, ...]:
    ports: dict[int, list[int]] = {}
    for port, rid in replicas:
        ports.setdefault(rid, []).append(port)
    return tuple(
        (port, rid) for rid in _attach_order(replicas, nodes) for port in sorted(ports[rid])
    )
