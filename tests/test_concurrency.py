"""The one concurrency model: how long k independent jobs take, and how many compute at once."""

from d2lhelpers.core.concurrency import concurrency_model, devices_at_once, slowdown_model


def test_the_model_is_max_of_one_and_k_over_the_usable_cores():
    assert [concurrency_model(k, 2) for k in (1, 2, 3, 4)] == [1.0, 1.0, 1.5, 2.0]
    assert [concurrency_model(k, 1) for k in (1, 2, 3)] == [1.0, 2.0, 3.0]


def test_each_kind_of_device_has_its_model():
    assert [slowdown_model(k, "logical CPU", 2) for k in (1, 3)] == [1.0, 1.5]
    assert [slowdown_model(k, "GPU", 1) for k in (1, 4)] == [1.0, 1.0]  # a chip each
    assert slowdown_model(2, "virtual GPU", 2) is None  # one chip shared: no model claimed


def test_at_most_the_usable_cores_compute_at_once_on_logical_cpus():
    assert [devices_at_once(k, "logical CPU", 2) for k in (1, 2, 3)] == [1, 2, 2]
    assert devices_at_once(3, "GPU", 1) == 3 and devices_at_once(3, "virtual GPU", 1) == 3
