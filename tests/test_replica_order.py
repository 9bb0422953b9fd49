"""The model sends a multicast group's copies in BMv2's order (issue 32).

BMv2 behind PI's P4Runtime server sends a group's copies in the order it attached the
group's nodes, which libstdc++'s ``unordered_map`` iteration order and the group's INSERT and
MODIFY history decide (`ina.switch_model.replica_order` explains it). The table below is
what BMv2 was seen to send; the model must send the same. The map model is also checked
against a literal singly linked list with bucket pointers, the way libstdc++ keeps it.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.control.p4rt import DELETE, INSERT, MODIFY, SwitchConnection
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.replica_order import (
    McastGroup,
    UnorderedMapOrder,
    insert_group,
    insert_order,
    modify_group,
    modify_order,
    send_order,
)
from ina.switch_model.tables import Tables

GROUP = 7

# (what was written, in order; the copies BMv2 sent, as (port, rid)). A write is
# ("insert" | "modify", [(port, rid), ...]) or ("delete",).
OBSERVED = {
    # the rehash from 13 to 29 buckets at the 14th entry reverses the first 13
    "14 replicas ascending, one port": (
        [("insert", [(1, r) for r in range(14)])],
        [(1, 13)] + [(1, r) for r in range(13)],
    ),
    # workers 0 and 2 behind port 2: BMv2 sends replica 0 there first
    "3 workers, deleted and inserted again in descending order": (
        [
            ("insert", [(2, 0), (3, 1), (2, 2)]),
            ("delete",),
            ("insert", [(2, 2), (3, 1), (2, 0)]),
        ],
        [(2, 0), (3, 1), (2, 2)],
    ),
    # replica 1 dropped by one MODIFY and added back by the next: it is attached last
    "3 replicas, replica 1 dropped and added again": (
        [
            ("insert", [(1, 0), (1, 1), (1, 2)]),
            ("modify", [(1, 0), (1, 2)]),
            ("modify", [(1, 0), (1, 2), (1, 1)]),
        ],
        [(1, 2), (1, 0), (1, 1)],
    ),
    # a MODIFY that lists the same replicas in another order keeps the order
    "3 workers, the same replicas modified in descending order": (
        [("insert", [(2, 0), (2, 2), (3, 1)]), ("modify", [(3, 1), (2, 2), (2, 0)])],
        [(3, 1), (2, 2), (2, 0)],
    ),
} | {
    # small groups inserted ascending (no rehash): reverse of the insertion order
    f"{n} replicas ascending": (
        [("insert", [(1 + r % 3, r) for r in range(n)])],
        [(1 + r % 3, r) for r in reversed(range(n))],
    )
    for n in (1, 2, 3, 4, 8, 13)
}


def apply(tables: Tables, writes) -> None:
    for write in writes:
        if write[0] == "delete":
            del tables.mcast_groups[GROUP]
        else:
            assert (GROUP in tables.mcast_groups) == (write[0] == "modify")
            tables.write_group(GROUP, write[1])


@pytest.mark.parametrize("case", list(OBSERVED))
def test_the_model_sends_copies_in_the_order_bmv2_did(case):
    writes, sent = OBSERVED[case]
    tables = Tables()
    apply(tables, writes)
    assert tables.replicas(GROUP) == sent
    assert tables.mcast_groups[GROUP] == writes[-1][1]  # reads see the last write as written


@pytest.mark.network
@pytest.mark.parametrize("case", list(OBSERVED))
def test_p4runtime_writes_give_the_same_order(case):
    """The same writes through the model's P4Runtime service (the PRE write path)."""
    from ina.switch_model.p4runtime_server import start_server

    writes, sent = OBSERVED[case]
    pipeline = Pipeline(lanes=4, pool_total=64)
    server = start_server(pipeline, "127.0.0.1:0")
    conn = SwitchConnection(server.address, timeout=5)
    try:
        kind = {"insert": INSERT, "modify": MODIFY, "delete": DELETE}
        for write in writes:
            entity = conn.multicast_group(GROUP, write[1] if len(write) > 1 else ())
            conn.write([conn.update(kind[write[0]], entity)])
        assert pipeline.tables.replicas(GROUP) == sent
    finally:
        conn.close()
        server.stop(0)


def test_a_group_written_straight_into_the_tables_is_one_insert():
    tables = Tables()
    tables.mcast_groups[GROUP] = [(1, r) for r in range(14)]  # as `ina switch --jobs` does
    assert tables.replicas(GROUP) == [(1, 13)] + [(1, r) for r in range(13)]
    tables.write_group(GROUP, [(1, r) for r in range(15)])  # then a MODIFY adds replica 14
    assert tables.replicas(GROUP) == [(1, 13)] + [(1, r) for r in range(13)] + [(1, 14)]


def test_a_node_sends_its_ports_in_ascending_order():
    # one rid on several ports is one node; BMv2 walks its port map upwards
    group = insert_group([(5, 0), (3, 1), (1, 0)])
    assert send_order(group) == [(3, 1), (1, 0), (5, 0)]


def test_a_group_keeps_its_order_through_pickle():
    import pickle

    group = modify_group(insert_group([(1, 0), (1, 1), (1, 2)]), [(1, 0), (1, 2)])
    back = pickle.loads(pickle.dumps(group))  # as `ina switch --shards` publishes tables
    assert isinstance(back, McastGroup) and back == group and back.nodes == group.nodes


def test_bucket_counts_follow_libstdcxx():
    m = UnorderedMapOrder()
    counts = []
    for key in range(65536):
        m.insert(key)
        if not counts or counts[-1] != m.bucket_count:
            counts.append(m.bucket_count)
    assert counts == [13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229]


# -- properties ------------------------------------------------------------------------------


class LinkedMap:
    """libstdc++'s unique-key hashtable as it is: one singly linked list behind a
    before-begin node, and per bucket a pointer to the node before its first (None: empty)."""

    def __init__(self, buckets: int) -> None:
        self.next: dict[object, int | None] = {"head": None}
        self.before: list[object | None] = [None] * buckets

    def link(self, key: int) -> None:
        n = len(self.before)
        b = key % n
        if self.before[b] is None:  # empty bucket: to the front of the whole list
            self.next[key] = self.next["head"]
            self.next["head"] = key
            if self.next[key] is not None:  # the old front's bucket now starts after key
                self.before[self.next[key] % n] = key
            self.before[b] = "head"
        else:  # first of its bucket's nodes
            self.next[key] = self.next[self.before[b]]
            self.next[self.before[b]] = key

    def __iter__(self):
        key = self.next["head"]
        while key is not None:
            yield key
            key = self.next[key]


def reference_order(keys: list[int]) -> list[int]:
    """Iteration order by `LinkedMap`, with `UnorderedMapOrder`'s bucket counts."""
    sizes = UnorderedMapOrder()
    linked = LinkedMap(1)
    for key in keys:
        if not sizes.insert(key):
            continue
        if sizes.bucket_count != len(linked.before):  # rehash: re-link in the old order
            old = list(linked)
            linked = LinkedMap(sizes.bucket_count)
            for k in old:
                linked.link(k)
        linked.link(key)
    return list(linked)


keys_16 = st.lists(st.integers(0, 0xFFFF), max_size=200)


@settings(max_examples=200, deadline=None)
@given(keys_16)
def test_map_order_is_the_linked_list_order(keys):
    order = insert_order(keys)
    assert order == reference_order(keys)
    assert sorted(order) == sorted(set(keys))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 511), st.integers(0, 300)), unique=True, max_size=80))
def test_the_copies_are_a_permutation_of_the_replicas(replicas):
    assert sorted(send_order(replicas)) == sorted(replicas)
    assert sorted(send_order(insert_group(replicas))) == sorted(replicas)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 300), unique=True, max_size=60),
    st.lists(st.integers(0, 300), unique=True, max_size=60),
)
def test_modify_never_reorders_the_nodes_it_keeps(old, new):
    attached = insert_order(old)
    after = modify_order(attached, new)
    kept = [r for r in attached if r in set(new)]
    added = [r for r in after if r not in set(old)]
    assert after == kept + added
    assert added == [r for r in insert_order(new) if r not in set(old)]
    assert sorted(after) == sorted(new)
