"""Each all-reduce algorithm's costs in closed form, against the schedules that notebook 05
runs (their costs counted from every message) and against hand-worked numbers."""

import ast
import importlib
import inspect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from d2lhelpers.collectives.algorithms import ALGORITHMS, allreduce_costs, allreduce_time_s
from d2lhelpers.collectives.schedules import (
    reduce_then_broadcast,
    ring_allreduce,
    tree_allreduce,
)

SCHEDULES = {"seed": reduce_then_broadcast, "ring": ring_allreduce, "tree": tree_allreduce}


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 24), length=st.integers(1, 50), element_bytes=st.integers(1, 8))
def test_closed_forms_equal_the_costs_counted_from_the_schedules(n, length, element_bytes):
    vectors = [[1] * length for _ in range(n)]
    for name in ALGORITHMS:
        counted = SCHEDULES[name](vectors, element_bytes).costs
        assert counted == allreduce_costs(name, n, length, element_bytes), (name, n, length)


@pytest.mark.parametrize("n", [2, 3, 4, 5])
@pytest.mark.parametrize("length", [1, 2, 3, 7, 8])
def test_closed_forms_at_the_small_edges(n, length):
    vectors = [[1] * length for _ in range(n)]
    for name in ALGORITHMS:
        assert SCHEDULES[name](vectors).costs == allreduce_costs(name, n, length), name


def test_two_ranks_by_hand():
    # Two ranks, 5 elements of 4 bytes: the ring's chunks are 3 and 2 elements.
    ring = allreduce_costs("ring", 2, 5)
    assert (ring.rounds, ring.messages) == (2, 4)
    assert ring.bytes_per_link == ring.bytes_per_rank == (3 + 2) * 4  # each link: both chunks
    assert ring.sequential_bytes == 2 * 3 * 4  # two rounds of the larger chunk
    tree = allreduce_costs("tree", 2, 5)
    assert (tree.rounds, tree.messages) == (2, 2)
    assert tree.bytes_per_link == tree.bytes_per_rank == 5 * 4
    assert tree.sequential_bytes == 2 * 5 * 4
    seed = allreduce_costs("seed", 2, 5)
    assert (seed.rounds, seed.messages, seed.bytes_per_link, seed.bytes_per_rank) == (2, 2, 20, 20)
    # Two ranks and one element: the ring's second chunk is empty; a round still happens.
    one = allreduce_costs("ring", 2, 1)
    assert (one.rounds, one.bytes_per_link, one.sequential_bytes) == (2, 4, 8)


def test_one_rank_costs_nothing():
    for name in ALGORITHMS:
        c = allreduce_costs(name, 1, 10)
        assert c.rounds == c.messages == c.bytes_per_link == c.bytes_per_rank == 0
        assert c.sequential_bytes == 0 and c.time_s(1e-3, 1e9) == 0


def test_rounds_for_eight_gpus_try_it_1():
    rounds = {a: allreduce_costs(a, 8, 1).rounds for a in ALGORITHMS}
    assert rounds == {"ring": 14, "tree": 6, "seed": 14}
    assert allreduce_costs("tree", 64, 1).rounds == 12
    assert allreduce_costs("tree", 9, 1).rounds == 8  # ceil(log2 9) = 4 up, 4 down


def test_alpha_beta_prediction():
    # 8 ranks, 8 MB, alpha 10 us, beta 10 GB/s.
    # Ring: 14 alpha + 14 MB / beta. Tree: 6 alpha + 6 x 8 MB / beta.
    assert allreduce_time_s("ring", 8, 8_000_000, 10e-6, 1e10) == pytest.approx(140e-6 + 1.4e-3)
    assert allreduce_time_s("tree", 8, 8_000_000, 10e-6, 1e10) == pytest.approx(60e-6 + 4.8e-3)
    assert allreduce_time_s("seed", 2, 1000, 1e-6, 1e9) == pytest.approx(2e-6 + 2e-6)
    tiny_tree = allreduce_time_s("tree", 8, 8, 10e-6, 1e10)
    assert tiny_tree < allreduce_time_s("ring", 8, 8, 10e-6, 1e10)  # latency-bound: tree wins


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: allreduce_costs("butterfly", 4, 8), ValueError, "^algorithm must be one of"),
        (lambda: allreduce_costs("ring", 0, 8), ValueError, "^n_ranks must be at least 1"),
        (lambda: allreduce_costs("ring", 2.5, 8), TypeError, "^n_ranks must be a whole number"),
        (lambda: allreduce_costs("ring", 4, True), TypeError, "^n_elements must be a whole"),
        (lambda: allreduce_costs("ring", 4, 0), ValueError, "^n_elements must be at least 1"),
        (lambda: allreduce_costs("ring", 4, 8, 0), ValueError, "^element_bytes must be at least"),
        (
            lambda: allreduce_time_s("ring", 4, 0, 1e-6, 1e9),
            ValueError,
            "^nbytes must be at least 1",
        ),
        (lambda: allreduce_time_s("ring", 4, 1.5, 1e-6, 1e9), TypeError, "^nbytes must be a whole"),
    ],
)
def test_types_and_ranges_are_checked_first(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_the_smallest_message_is_one_byte():
    assert allreduce_time_s("ring", 2, 1, 1e-6, 1e9) == pytest.approx(2e-6 + 2e-9)


@pytest.mark.parametrize("module", ["algorithms", "costs", "transfers", "patterns", "schedules"])
def test_pure_python_modules_import_no_tensorflow(module):
    source = importlib.import_module(f"d2lhelpers.collectives.{module}")
    tree = ast.parse(inspect.getsource(source))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    pure = {"__future__", "dataclasses", "functools", "math"}
    package = {n for n in imported if n.startswith(("d2lhelpers.core.", "d2lhelpers.collectives."))}
    assert imported - package <= pure, imported - package
    assert not {n for n in package if n.endswith(("tf_collective", "tf_allreduce"))}
