"""Notebook 05's TensorFlow all-reduce (`collectives/tf_collective.py`, saved from its cells) and
its keys: the element-wise sum on every device, one op per device, the forced order."""

import numpy as np
import pytest

from d2lhelpers.collectives import collective_keys as keys
from d2lhelpers.collectives import tf_allreduce, tf_collective


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_allreduce_is_the_elementwise_sum_on_every_device(devices, n):
    xs = tf_allreduce.allreduce_inputs(
        13 * 4, devices[:n], seed=n
    )  # 13: no even split into n chunks
    run = tf_collective.allreduce_in_one_graph(devices[:n])
    expected = np.sum([x.numpy() for x in xs], axis=0)
    sums = run(*xs)
    assert len(sums) == n
    for total in sums:
        np.testing.assert_allclose(total.numpy(), expected, rtol=1e-6)
    # One collective per device, each placed on its own device, nothing else computing.
    graph = run.get_concrete_function(*xs).graph
    ops = [op for op in graph.get_operations() if op.type == "CollectiveReduceV2"]
    assert sorted(op.device.split("device:")[-1] for op in ops) == [f"CPU:{i}" for i in range(n)]
    assert sorted(op.name for op in ops) == [f"allreduce_{i}" for i in range(n)]
    others = {op.type for op in graph.get_operations()} - {"CollectiveReduceV2"}
    assert others <= {"Const", "Placeholder", "Identity", "NoOp"}  # keys, inputs, outputs
    hints = {op.get_attr("communication_hint") for op in ops}
    assert hints == {b"ring"}  # logical CPUs: TensorFlow's ring, not NCCL


def test_allreduce_traced_again_for_a_new_size_keeps_working(devices):
    run = tf_collective.allreduce_in_one_graph(devices[:2])
    for nbytes in (8, 4096, 8):
        xs = tf_allreduce.allreduce_inputs(nbytes, devices[:2])
        np.testing.assert_allclose(run(*xs)[1].numpy(), (xs[0] + xs[1]).numpy(), rtol=1e-6)


def test_allreduce_and_compute_returns_the_sums_and_the_chains(devices):
    grads = tf_allreduce.allreduce_inputs(64, devices[:2])
    xs = [np.eye(3, dtype=np.float32) * (i + 1) for i in range(2)]
    for overlap in (True, False):
        run = tf_collective.allreduce_and_compute(devices[:2], 2, overlap)
        reduced, products = run(grads, xs)
        np.testing.assert_allclose(reduced[0].numpy(), (grads[0] + grads[1]).numpy(), rtol=1e-6)
        np.testing.assert_allclose(products[1].numpy(), np.eye(3) * 8)  # x @ x @ x, x = 2I


def test_every_device_has_one_ordering_token(devices):
    names = [d.name for d in devices[:2]]
    tf_collective.allreduce_in_one_graph(devices[:2])
    first = [tf_collective.ordering_token(name) for name in names]
    again = [tf_collective.ordering_token(name) for name in names]
    assert all(a is b for a, b in zip(first, again, strict=True))
    placed = [tf_collective.ordering_tokens[name].device for name in names]
    assert [p.split("device:")[-1] for p in placed] == ["CPU:0", "CPU:1"]


def test_keys_one_group_per_set_of_devices_a_new_instance_every_time():
    a = keys.collective_keys(("/x:0", "/x:1"))
    b = keys.collective_keys(("/x:0", "/x:1"))
    c = keys.collective_keys(("/x:1", "/x:0"))  # another rank order: another group
    assert a[0] == b[0] != c[0] and a[0] >= keys.GROUP_KEY_BASE
    assert len({a[1], b[1], c[1]}) == 3 and b[1] > a[1]


def test_communication_hint(devices):
    assert keys.communication_hint(devices[:2]) == "ring"  # logical CPUs
    assert keys.communication_hint(["/device:GPU:0"]) == "ring"  # names alone: the safe choice
    gpu = type(devices[0])("/device:GPU:0", "GPU", 0, "")
    assert keys.communication_hint([gpu, gpu]) == "auto"
    virtual = type(devices[0])("/device:GPU:0", "virtual GPU", 0, "")
    assert keys.communication_hint([virtual, virtual]) == "ring"
