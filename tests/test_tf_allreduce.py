"""Around TensorFlow's all-reduce (`collectives/tf_allreduce.py`): the devices and sizes it is
given, memory, and its inputs."""

import numpy as np
import pytest

from d2lhelpers.collectives import tf_allreduce as tc
from d2lhelpers.core.units import MiB
from tests.conftest import builds_nothing


def test_sizes_up_to():
    assert tc.sizes_up_to(16 * MiB) == [4096 * 4**k for k in range(7)]
    assert tc.sizes_up_to(10_000) == [4096, 10_000]
    assert tc.sizes_up_to(4096) == [4096]
    for bad in (4095, 6 * 1024 + 2, 0):
        with pytest.raises(ValueError):
            tc.sizes_up_to(bad)
    with pytest.raises(TypeError):
        tc.sizes_up_to(4096.0)


@pytest.mark.parametrize(
    "sizes, error",
    [
        ([], ValueError),
        ([4096], ValueError),
        ([4096, 4096], ValueError),
        ([0, 4096], ValueError),
        ([-4, 4096], ValueError),
        ([6, 4096], ValueError),
        ([4.0, 4096], TypeError),
        ([True, 4096], TypeError),
        ("4096", TypeError),
        (4096, TypeError),
    ],
)
def test_allreduce_sizes_refuses(sizes, error):
    with pytest.raises(error):
        tc.allreduce_sizes(sizes)


def test_allreduce_sizes_sorts_and_deduplicates():
    assert tc.allreduce_sizes([64, 8, 64, np.int64(16)]) == [8, 16, 64]


def test_oversize_messages_are_refused_before_allocating_naming_the_largest_that_fits(devices):
    largest = tc.largest_message_that_fits(devices[:2])
    assert largest >= 4096 and largest & (largest - 1) == 0  # a power of two
    tc.require_message_fits(largest, devices[:2], "fits")  # no error
    with builds_nothing():
        with pytest.raises(ValueError, match=r"largest size that fits is") as refused:
            tc.require_message_fits(2 * largest, devices[:2], "twice as much")
    assert "free" in str(refused.value)


def test_allreduce_inputs_hold_rank_plus_noise_on_each_device(devices):
    xs = tc.allreduce_inputs(4 * 100, devices[:3], seed=7)
    assert [x.shape for x in xs] == [(100,)] * 3
    assert [x.device.split("device:")[-1] for x in xs] == ["CPU:0", "CPU:1", "CPU:2"]
    for rank, x in enumerate(xs):
        assert np.all((x.numpy() >= rank + 1) & (x.numpy() < rank + 2))
    assert len(set(xs[0].numpy())) == 100  # random, not a constant
    long = tc.allreduce_inputs(4 * (tc.NOISE_BLOCK + 5), devices[:1])[0].numpy()
    assert long.shape == (tc.NOISE_BLOCK + 5,) and np.all(long[-5:] == long[:5])  # repeated


def test_allreduce_devices_refuse_one_device_saying_why(devices, monkeypatch):
    assert tc.allreduce_devices(None, "x") == devices
    assert tc.allreduce_devices(2, "x") == devices[:2]
    with pytest.raises(ValueError, match="moves nothing, so nothing runs: choose n_devices from 2"):
        tc.allreduce_devices(1, "nothing runs")
    monkeypatch.setattr(tc, "setup_devices", lambda: devices[:1])
    with pytest.raises(ValueError, match=r"only 1 device is set up: run d2l.setup_devices\(2\)"):
        tc.allreduce_devices(None, "x")
