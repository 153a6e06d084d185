"""Collectives against oracles: the Go program's own output, the element-wise sum, closed forms."""

import ast
import inspect
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from d2lhelpers.collectives import algorithms as collectives
from d2lhelpers.collectives import costs
from d2lhelpers.collectives.algorithms import (
    ALLREDUCE,
    all_gather,
    allreduce,
    allreduce_stats,
    allreduce_time_s,
    broadcast,
    chunk_bounds,
    format_rounds_table,
    go_format_float,
    reduce,
    reduce_scatter,
    reduce_then_broadcast,
    ring_allreduce,
    rounds_table,
    seed_allreduce,
    seed_program_output,
    tree_allreduce,
)

GO_OUTPUT = (Path(__file__).parent / "seeds" / "004_allreduce_go_output.txt").read_text()

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


def test_seed_program_prints_the_go_output_byte_for_byte():
    assert GO_OUTPUT.startswith("every GPU now holds [1111 2222] after 6 hops\n\nGPUs")
    assert seed_program_output().encode() == GO_OUTPUT.encode()


def test_seed_allreduce_mutates_like_go():
    gpus = [[1.0, 2.0], [10.0, 20.0], [100.0, 200.0], [1000.0, 2000.0]]
    row = gpus[2]
    assert seed_allreduce(gpus) == 6
    assert gpus == [[1111.0, 2222.0]] * 4 and gpus[2] is row  # filled in place
    assert seed_allreduce([[5]]) == 0


@pytest.mark.parametrize(
    "value, printed",  # as go1.19.8's fmt.Println prints them
    [
        (1111.0, "1111"),
        (0.5, "0.5"),
        (-2.25, "-2.25"),
        (999999.0, "999999"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (608863452348.1149, "6.088634523481149e+11"),
        (0.1 + 0.2, "0.30000000000000004"),
        (0.0, "0"),
        (-0.0, "-0"),
        (float("inf"), "+Inf"),
        (float("nan"), "NaN"),
    ],
)
def test_go_format_float(value, printed):
    assert go_format_float(value) == printed


@pytest.mark.parametrize("module", [collectives, costs])
def test_pure_python_modules_import_no_tensorflow(module):
    tree = ast.parse(inspect.getsource(module))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    package = {
        "d2lhelpers.core.checks",
        "d2lhelpers.collectives.costs",
        "d2lhelpers.core.units",
    }  # no TF either
    assert imported <= {"__future__", "dataclasses", "decimal", "math", "numbers", "os", *package}


def test_the_five_collectives():
    x = [[1, 2, 3], [10, 20, 30], [100, 200, 300]]
    assert broadcast(x, root=1) == [[10, 20, 30]] * 3
    assert reduce(x, root=2) == [[1, 2, 3], [10, 20, 30], [111, 222, 333]]
    assert reduce_scatter(x) == [[111], [222], [333]]
    assert all_gather([[1, 2], [3], []]) == [[1, 2, 3]] * 3
    assert allreduce(x) == [[111, 222, 333]] * 3
    assert reduce_scatter([[1, 2, 3, 4, 5]] * 2) == [[2, 4, 6], [8, 10]]  # uneven chunks
    assert x == [[1, 2, 3], [10, 20, 30], [100, 200, 300]]  # inputs untouched


def test_chunk_bounds_cover_uneven_lengths():
    assert chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert chunk_bounds(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]


@pytest.mark.parametrize(
    "call",
    [ring_allreduce, tree_allreduce, reduce_then_broadcast, seed_allreduce, allreduce, broadcast],
)
@pytest.mark.parametrize(
    "vectors, message",
    [([], "n >= 1"), ([[1], []], "non-empty"), ([[1, 2], [3]], "one length")],
)
def test_bad_input_is_refused(call, vectors, message):
    with pytest.raises(ValueError, match=message):
        call(vectors)


def test_other_refusals():
    with pytest.raises(ValueError, match="root"):
        broadcast([[1], [2]], root=2)
    with pytest.raises(ValueError, match="n >= 1"):
        all_gather([])
    with pytest.raises(ValueError, match="algorithm"):
        allreduce_stats("butterfly", 4, 8)
    with pytest.raises(ValueError, match="n_ranks must be at least 1"):
        allreduce_stats("ring", 0, 8)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: allreduce_stats("ring", 2.5, 8), TypeError),
        (lambda: allreduce_stats("ring", 4, True), TypeError),
        (lambda: allreduce_stats("ring", 4, 0), ValueError),
        (lambda: allreduce_time_s("ring", 4, 0, 1e-6, 1e9), ValueError),
        (lambda: allreduce_time_s("ring", 4, 1.5, 1e-6, 1e9), TypeError),
        (lambda: chunk_bounds(10, 0), ValueError),
        (lambda: chunk_bounds(10.0, 2), TypeError),
        (lambda: broadcast([[1], [2]], root=True), TypeError),
        (lambda: reduce([[1], [2]], root=-1), ValueError),
        (lambda: rounds_table([]), ValueError),
        (lambda: rounds_table([2, "8"]), TypeError),
    ],
)
def test_types_and_ranges_are_checked_first(call, error):
    with pytest.raises(error):
        call()


@settings(max_examples=150, deadline=None)
@given(ranks_and_vectors)
def test_every_algorithm_sums_and_matches_its_closed_form(vectors):
    n, length = len(vectors), len(vectors[0])
    expected = elementwise_sum(vectors)
    for name, algorithm in ALLREDUCE.items():
        run = algorithm(vectors)
        assert run.result == [expected] * n, name
        assert run.stats == allreduce_stats(name, n, length), name


@settings(max_examples=100, deadline=None)
@given(ranks_and_vectors)
def test_ring_schedule(vectors):
    n, length = len(vectors), len(vectors[0])
    run = ring_allreduce(vectors, element_bytes=2)
    assert run.stats.rounds == 2 * (n - 1)
    assert run.stats.messages == 2 * n * (n - 1)
    for rank in range(n):
        sent = [t for t in run.transfers if t.sender == rank]
        assert len(sent) == 2 * (n - 1)
        assert {t.receiver for t in sent} <= {(rank + 1) % n}
    bounds = chunk_bounds(length, n)
    assert all(t.n_elements == bounds[t.chunk][1] - bounds[t.chunk][0] for t in run.transfers)
    for step in range(2 * (n - 1)):  # every round moves each chunk exactly once
        assert sorted(t.chunk for t in run.transfers if t.step == step) == list(range(n))
    if length % n == 0:
        assert run.stats.bytes_per_link == 2 * (n - 1) * (length // n) * 2


@settings(max_examples=100, deadline=None)
@given(ranks_and_vectors)
def test_tree_schedule(vectors):
    n = len(vectors)
    run = tree_allreduce(vectors)
    levels = (n - 1).bit_length()
    assert levels == math.ceil(math.log2(n)) and run.stats.rounds == 2 * levels
    assert run.stats.messages == 2 * (n - 1)
    for step in range(run.stats.rounds):  # a rank sends at most one, receives at most one
        this_round = [t for t in run.transfers if t.step == step]
        assert len({t.sender for t in this_round}) == len(this_round)
        assert len({t.receiver for t in this_round}) == len(this_round)


def test_ring_by_hand():
    run = ring_allreduce([[1, 2, 3], [10, 20, 30], [100, 200, 300]])
    first = [(t.sender, t.receiver, t.chunk, t.phase) for t in run.transfers if t.step == 0]
    assert first == [
        (0, 1, 0, "reduce-scatter"),
        (1, 2, 1, "reduce-scatter"),
        (2, 0, 2, "reduce-scatter"),
    ]
    last = [(t.sender, t.chunk, t.phase) for t in run.transfers if t.step == 3]
    assert last == [(0, 0, "all-gather"), (1, 1, "all-gather"), (2, 2, "all-gather")]
    assert run.result == [[111, 222, 333]] * 3


def test_seed_schedule_is_reduce_then_broadcast():
    run = reduce_then_broadcast([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0], [1000.0, 2000.0]])
    assert run.result == [[1111.0, 2222.0]] * 4
    assert run.stats.messages == 6  # the Go program's hop count
    assert [(t.sender, t.receiver) for t in run.transfers] == [
        (0, 1),
        (1, 2),
        (2, 3),
        (3, 0),
        (3, 1),
        (3, 2),
    ]
    assert run.stats.bytes_per_rank == 3 * 2 * 4  # rank 3 sends the whole vector three times


def test_try_it_1_rounds_for_8_gpus():
    rows = {n: (ring, tree, seed) for n, ring, tree, seed in rounds_table()}
    assert rows[8] == (14, 6, 14)
    assert sorted(rows) == list(range(2, 65))
    assert rows[64] == (126, 12, 126)
    text = format_rounds_table(rounds_table([2, 8]))
    assert text == "GPUs  ring  tree  seed\n   2     2     2     2\n   8    14     6    14\n"


def test_alpha_beta_prediction():
    # 8 ranks, 8 MB, alpha 10 us, beta 10 GB/s.
    # Ring: 14 alpha + 14 MB / beta. Tree: 6 alpha + 6 x 8 MB / beta.
    assert allreduce_time_s("ring", 8, 8_000_000, 10e-6, 1e10) == pytest.approx(140e-6 + 1.4e-3)
    assert allreduce_time_s("tree", 8, 8_000_000, 10e-6, 1e10) == pytest.approx(60e-6 + 4.8e-3)
    tiny_tree = allreduce_time_s("tree", 8, 8, 10e-6, 1e10)
    assert tiny_tree < allreduce_time_s("ring", 8, 8, 10e-6, 1e10)  # latency-bound: tree wins
