"""Notebook 05's collectives in plain Python (`patterns`, `schedules`, saved from its cells, and
`transfers`): against the element-wise sum, and every message of small schedules by hand."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from d2lhelpers.collectives.patterns import (
    all_gather,
    allreduce,
    broadcast,
    reduce,
    reduce_scatter,
)
from d2lhelpers.collectives.schedules import (
    reduce_then_broadcast,
    ring_allreduce,
    ring_round,
    tree_allreduce,
)
from d2lhelpers.collectives.transfers import (
    AllreduceStepsResult,
    Transfer,
    chunk_bounds,
    rank_vectors,
)

SCHEDULES = (ring_allreduce, tree_allreduce, reduce_then_broadcast)

# Integers: every summation order gives the same exact answer.
ranks_and_vectors = st.integers(1, 16).flatmap(
    lambda n: st.integers(1, 40).flatmap(
        lambda length: st.lists(
            st.lists(st.integers(-(10**6), 10**6), min_size=length, max_size=length),
            min_size=n,
            max_size=n,
        )
    )
)


def elementwise_sum(vectors):
    return [sum(column) for column in zip(*vectors, strict=True)]


def messages(run, step=None):
    """(sender, receiver, chunk, elements) of every message, or of one round's."""
    return [
        (t.sender, t.receiver, t.chunk, t.n_elements)
        for t in run.transfers
        if step is None or t.step == step
    ]


# --- The five collectives ------------------------------------------------------------------------


def test_the_five_collectives():
    x = [[1, 2, 3], [10, 20, 30], [100, 200, 300]]
    assert broadcast(x, root=1) == [[10, 20, 30]] * 3
    assert broadcast(x) == [[1, 2, 3]] * 3  # root 0 unless told
    assert reduce(x, root=2) == [[1, 2, 3], [10, 20, 30], [111, 222, 333]]
    assert reduce(x) == [[111, 222, 333], [10, 20, 30], [100, 200, 300]]
    assert reduce_scatter(x) == [[111], [222], [333]]
    assert all_gather([[1, 2], [3], []]) == [[1, 2, 3]] * 3
    assert all_gather([]) == []  # no ranks, nothing gathered
    assert allreduce(x) == [[111, 222, 333]] * 3
    assert reduce_scatter([[1, 2, 3, 4, 5]] * 2) == [[2, 4, 6], [8, 10]]  # uneven chunks
    assert x == [[1, 2, 3], [10, 20, 30], [100, 200, 300]]  # inputs untouched


@pytest.mark.parametrize("collective", [broadcast, reduce])
def test_the_root_is_one_of_the_ranks(collective):
    x = [[1], [2], [3]]
    by_root = {
        broadcast: {0: [[1]] * 3, 2: [[3]] * 3},
        reduce: {0: [[6], [2], [3]], 2: [[1], [2], [6]]},
    }
    for root, expected in by_root[collective].items():  # the first rank and the last, n - 1
        assert collective(x, root=root) == expected
    for root in (3, -1):
        with pytest.raises(ValueError, match=r"^root \(a rank\) must be at least 0 and at most 2"):
            collective(x, root=root)
    with pytest.raises(TypeError, match=r"^root \(a rank\) must be a whole number"):
        collective(x, root=True)


def test_rank_vectors_copies_and_refuses():
    x = [(1, 2), [3, 4]]
    copied = rank_vectors(x, root=1)
    assert copied == [[1, 2], [3, 4]] and copied[1] is not x[1]
    for bad, message in [
        ([], r"^need at least one rank \(n >= 1\), got no vectors$"),
        ([[1], []], "^every rank needs a non-empty vector$"),
        ([[1, 2], [3]], r"^all ranks need vectors of one length, got lengths \[1, 2\]$"),
    ]:
        with pytest.raises(ValueError, match=message):
            rank_vectors(bad)


def test_chunk_bounds_cover_uneven_lengths():
    assert chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert chunk_bounds(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]
    assert chunk_bounds(5, 1) == [(0, 5)]
    assert chunk_bounds(0, 2) == [(0, 0), (0, 0)]
    with pytest.raises(ValueError, match=r"^n \(chunks\) must be at least 1"):
        chunk_bounds(10, 0)
    with pytest.raises(ValueError, match="^length must be at least 0"):
        chunk_bounds(-1, 2)
    with pytest.raises(TypeError, match="^length must be a whole number"):
        chunk_bounds(10.0, 2)


# --- Schedules: every message of n = 3 by hand ---------------------------------------------------


def test_ring_of_three_by_hand():
    run = ring_allreduce([[1, 2, 3, 4], [10, 20, 30, 40], [100, 200, 300, 400]])
    # Chunks of 4 elements over 3 ranks: c0 = [0:2], c1 = [2:3], c2 = [3:4].
    rounds = [messages(run, step) for step in range(4)]
    assert rounds == [
        [(0, 1, 0, 2), (1, 2, 1, 1), (2, 0, 2, 1)],  # reduce-scatter, round 0: r sends r
        [(0, 1, 2, 1), (1, 2, 0, 2), (2, 0, 1, 1)],  # round 1: r sends r - 1
        [(0, 1, 1, 1), (1, 2, 2, 1), (2, 0, 0, 2)],  # all-gather, round 0: r sends r + 1
        [(0, 1, 0, 2), (1, 2, 1, 1), (2, 0, 2, 1)],  # round 1: r sends r
    ]
    assert [t.phase for t in run.transfers] == ["reduce-scatter"] * 6 + ["all-gather"] * 6
    assert run.vectors == [[111, 222, 333, 444]] * 3
    assert run.costs.rounds == 4 and run.costs.messages == 12
    assert run.costs.bytes_per_link == (1 + 2 + 1 + 2) * 4  # link 2 -> 0 carries c2, c1, c0, c2
    assert run.costs.sequential_bytes == 4 * 2 * 4  # each round's largest message: 2 elements


def test_tree_of_three_by_hand():
    run = tree_allreduce([[1, 2], [10, 20], [100, 200]])
    assert [(t.step, t.phase, t.sender, t.receiver) for t in run.transfers] == [
        (0, "reduce", 1, 0),  # stride 1: pair (0, 1); rank 2 waits
        (1, "reduce", 2, 0),  # stride 2: pair (0, 2)
        (2, "broadcast", 0, 2),
        (3, "broadcast", 0, 1),
    ]
    assert all(t.chunk == 0 and t.n_elements == 2 for t in run.transfers)  # whole vectors
    assert run.vectors == [[111, 222]] * 3


def test_seed_schedule_of_three_and_four_by_hand():
    three = reduce_then_broadcast([[1], [2], [4]])
    assert [(t.step, t.sender, t.receiver) for t in three.transfers] == [
        (0, 0, 1),
        (1, 1, 2),
        (2, 2, 0),
        (3, 2, 1),
    ]
    assert three.vectors == [[7]] * 3
    assert [t.phase for t in three.transfers] == ["reduce", "reduce", "broadcast", "broadcast"]
    assert {(t.chunk, t.n_elements) for t in three.transfers} == {(0, 1)}  # whole vectors
    four = reduce_then_broadcast([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0], [1000.0, 2000.0]])
    assert four.vectors == [[1111.0, 2222.0]] * 4
    assert four.costs.messages == 6  # the Go program's hop count
    assert four.costs.bytes_per_rank == 3 * 2 * 4  # rank 3 sends the whole vector three times


def test_ring_round_sends_before_receiving():
    data = [[1, 1], [2, 2]]
    sent = ring_round(data, [(0, 1), (1, 2)], [0, 1], add=True)
    # Rank 0 sent its old chunk 0 (1) and rank 1 its old chunk 1 (2), at the same time.
    assert sent == [(0, 1, 0, 1), (1, 0, 1, 1)]
    assert data == [[1, 3], [3, 2]]
    ring_round(data, [(0, 1), (1, 2)], [1, 0], add=False)
    assert data == [[3, 3], [3, 3]]


def test_one_rank_sends_nothing():
    for schedule in SCHEDULES:
        run = schedule([[5, 6]])
        assert run.vectors == [[5, 6]] and run.transfers == ()
        assert run.costs.rounds == run.costs.messages == run.costs.bytes_per_link == 0
        assert str(run).startswith(f"{run.algorithm} all-reduce on 1 ranks: 0 rounds")


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize(
    "vectors, message", [([], "n >= 1"), ([[1], []], "non-empty"), ([[1, 2], [3]], "one length")]
)
def test_bad_input_is_refused(schedule, vectors, message):
    with pytest.raises(ValueError, match=message):
        schedule(vectors)


@settings(max_examples=150, deadline=None)
@given(ranks_and_vectors)
def test_every_schedule_sums_and_leaves_its_input_alone(vectors):
    before = [list(v) for v in vectors]
    expected = elementwise_sum(vectors)
    for schedule in SCHEDULES:
        assert schedule(vectors).vectors == [expected] * len(vectors), schedule.__name__
    assert vectors == before
    assert allreduce(vectors) == [expected] * len(vectors)


@settings(max_examples=100, deadline=None)
@given(ranks_and_vectors)
def test_ring_schedule(vectors):
    n, length = len(vectors), len(vectors[0])
    run = ring_allreduce(vectors, element_bytes=2)
    for rank in range(n):
        sent = [t for t in run.transfers if t.sender == rank]
        assert len(sent) == 2 * (n - 1)
        assert {t.receiver for t in sent} <= {(rank + 1) % n}
    bounds = chunk_bounds(length, n)
    assert all(t.n_elements == bounds[t.chunk][1] - bounds[t.chunk][0] for t in run.transfers)
    for step in range(2 * (n - 1)):  # every round moves each chunk exactly once
        assert sorted(t.chunk for t in run.transfers if t.step == step) == list(range(n))
    if length % n == 0:
        assert run.costs.bytes_per_link == 2 * (n - 1) * (length // n) * 2


@settings(max_examples=100, deadline=None)
@given(ranks_and_vectors)
def test_tree_schedule(vectors):
    n = len(vectors)
    run = tree_allreduce(vectors)
    levels = (n - 1).bit_length()
    assert levels == math.ceil(math.log2(n)) and run.costs.rounds == 2 * levels
    assert run.costs.messages == 2 * (n - 1)
    for step in range(run.costs.rounds):  # a rank sends at most one, receives at most one
        this_round = [t for t in run.transfers if t.step == step]
        assert len({t.sender for t in this_round}) == len(this_round)
        assert len({t.receiver for t in this_round}) == len(this_round)


# --- A run's result: costs counted from its messages, and its table ------------------------------


def test_costs_are_counted_from_the_messages():
    transfers = (
        Transfer(0, "reduce", 0, 1, 0, 3),
        Transfer(0, "reduce", 2, 1, 0, 1),
        Transfer(1, "broadcast", 1, 0, 0, 2),
        Transfer(1, "broadcast", 0, 2, 0, 5),
        Transfer(2, "broadcast", 2, 1, 0, 6),
    )
    run = AllreduceStepsResult("tree", [[0] * 6] * 3, transfers, element_bytes=2)
    c = run.costs
    assert (c.algorithm, c.n_ranks, c.n_elements, c.element_bytes) == ("tree", 3, 6, 2)
    assert (c.rounds, c.messages) == (3, 5)
    assert c.bytes_per_link == (1 + 6) * 2  # link 2 -> 1; 0 -> 1 and 0 -> 2 are separate
    assert c.bytes_per_rank == (3 + 5) * 2  # rank 0 sent 3 and 5 elements
    assert c.sequential_bytes == (3 + 5 + 6) * 2  # each round's largest message


def test_the_table_lists_each_round():
    text = str(ring_allreduce([[1, 2], [3, 4]]))
    lines = text.splitlines()
    assert lines[0] == "ring all-reduce on 2 ranks: 2 rounds, 4 messages"
    assert lines[1].split() == ["round", "phase", "sender→receiver", "chunk"]
    assert lines[-1] == (
        "bytes through the busiest link 8, sent by the busiest rank 8, one round after another 8 "
        "(2 elements of 4 bytes per rank)"
    )
    assert "1      reduce-scatter  0→1 c0, 1→0 c1" in text
    assert "2      all-gather      0→1 c1, 1→0 c0" in text
    tree = str(tree_allreduce([[1], [2], [3], [4]]))
    assert "sender→receiver, whole vectors" in tree and "1→0, 3→2" in tree and " c0" not in tree
    seed = str(reduce_then_broadcast([[1], [2], [3]]))
    assert "sender→receiver, whole vectors" in seed and "0→1\n" in seed and " c0" not in seed
    assert "<table>" in ring_allreduce([[1], [2]])._repr_html_()


def test_ring_round_refuses_a_chunk_missing_from_the_senders_vector():
    # Rank 1's vector [5] has no chunk 1 (elements 1:2): it would send [] to rank 0, whose
    # chunk 1 ([2]) would be replaced by the empty sum and the vector cut to [1]. Refused.
    data = [[1, 2], [5]]
    with pytest.raises(ValueError, match="shorter"):
        ring_round(data, [(0, 1), (1, 2)], [0, 1], add=True)
