import pytest
import tensorflow as tf

import d2lhelpers as d2l
from d2lhelpers import devices as devices_module
from d2lhelpers.core.units import GiB, format_bytes
from d2lhelpers.devices import Plan, check_fits, max_device_count, plan_devices, small_machine
from tests.conftest import builds_nothing, run_python


@pytest.mark.parametrize(
    ("gpus", "count", "memory", "cores", "expected"),
    [
        (4, None, None, 8, Plan("GPU", 4)),  # several real GPUs: all of them by default
        (4, 2, None, 8, Plan("GPU", 2)),
        (1, None, 80_000, 8, Plan("virtual GPU", 4, memory_limit_mb=18_000)),
        (1, 2, 80_000, 8, Plan("virtual GPU", 2, memory_limit_mb=36_000)),
        (1, 1, 80_000, 8, Plan("GPU", 1)),  # one device of one chip: no need to carve
        (1, 2, None, 8, Plan("virtual GPU", 2, memory_limit_mb=3686)),  # memory unknown: 8 GiB
        (0, None, None, 2, Plan("logical CPU", 4)),  # at least 4 on CPU
        (0, None, None, 6, Plan("logical CPU", 6)),
        (0, None, None, 64, Plan("logical CPU", 8)),
        (0, 3, None, 2, Plan("logical CPU", 3)),
    ],
)
def test_plan_devices_every_branch(gpus, count, memory, cores, expected):
    assert plan_devices(gpus, count, memory, cores) == expected


def test_plan_devices_refuses_impossible_counts():
    with pytest.raises(ValueError, match="at least 1"):
        plan_devices(0, 0)
    with pytest.raises(ValueError, match="has 2 GPUs: choose at most 2"):
        plan_devices(2, 3)


@pytest.mark.parametrize(
    ("gpus", "cores", "memory", "cap"),
    [(0, 1, None, 8), (0, 2, None, 8), (0, 6, None, 12), (0, 64, None, 128), (3, 2, None, 3)]
    + [(1, 2, 80_000, 8), (1, 2, None, 8), (1, 2, 1000, 3), (1, 2, 100, 1)],
)
def test_the_device_cap(gpus, cores, memory, cap):
    assert max_device_count(gpus, cores, memory) == cap


@pytest.mark.parametrize(
    ("gpus", "count", "cores", "words"),
    [
        (
            0,
            10**6,
            2,
            "at most 8 may be set up (2 per usable CPU core, 8 at least): choose at most 8",
        ),
        (0, 9, 2, "choose at most 8"),
        (0, 13, 6, "choose at most 12"),
        (1, 9, 2, "at most 8 may be carved from this chip"),
        (2, 10**6, 2, "has 2 GPUs: choose at most 2"),
    ],
)
def test_setup_devices_refuses_a_count_above_the_cap_before_building(
    monkeypatch, gpus, count, cores, words
):
    monkeypatch.setattr(devices_module, "_plan", None)
    monkeypatch.setattr(devices_module, "_devices", None)
    monkeypatch.setattr(devices_module, "usable_cores", lambda: cores)
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["GPU"] * gpus)
    monkeypatch.setattr(devices_module, "_gpu_memory_mb", lambda index=0: 80_000)
    configured = []
    monkeypatch.setattr(devices_module, "_configure", lambda plan, g: configured.append(plan))
    with builds_nothing():
        with pytest.raises(ValueError) as error:
            d2l.setup_devices(count)
    assert words in str(error.value) and configured == []
    assert plan_devices(gpus, count - 1 if count < 100 else 1, 80_000, cores).count >= 1


@pytest.mark.parametrize("count", [2.5, "4", True, [4]])
def test_plan_devices_refuses_a_count_of_the_wrong_type(count):
    with pytest.raises(TypeError, match="count must be a whole number"):
        plan_devices(0, count, None, 2)


@pytest.mark.parametrize(
    ("cores", "available", "small"),
    [(1, 64 * GiB, True), (2, 64 * GiB, False), (2, 2 * GiB, True), (8, 3 * GiB, False)],
)
def test_small_machine_is_one_core_or_under_3_gib(cores, available, small):
    assert small_machine(cores, available) is small


def test_small_machine_asks_the_process_affinity_and_memory(monkeypatch):
    monkeypatch.setattr(devices_module, "usable_cores", lambda: 1)
    monkeypatch.setattr(devices_module, "available_memory_bytes", lambda: 64 * GiB)
    assert small_machine()
    monkeypatch.setattr(devices_module, "usable_cores", lambda: 4)
    assert not small_machine()
    monkeypatch.setattr(devices_module, "available_memory_bytes", lambda: 2 * GiB)
    assert small_machine()


def test_device_summary_speaks_of_usable_cores_and_a_small_machine(devices, monkeypatch):
    monkeypatch.setattr(devices_module, "usable_cores", lambda: 1)
    monkeypatch.setattr(devices_module, "available_memory_bytes", lambda: 16 * GiB)
    line = d2l.device_summary()
    assert line.startswith("4 logical CPU devices sharing 1 usable CPU core (no GPU)")
    assert "at most 1 can compute at the same time" in line and "2 CPU cores" not in line
    assert (
        "This is a small machine (1 usable CPU core, 16.0 GiB of memory available): notebook "
        in (line)
    )
    assert line.endswith(  # read 122: only notebook 06 acts on it; read 126: said as design
        "06's multi-process runs pick smaller defaults (the package's design, `machine_defaults`; "
        "notebook 06 prints the defaults it picked)."
    )
    assert "\n" not in line
    monkeypatch.setattr(devices_module, "usable_cores", lambda: 2)
    line = d2l.device_summary()
    assert "sharing 2 usable CPU cores" in line and "at most 2 can compute" in line
    assert "as configured here" in line and "collective threads" in line  # read 89
    monkeypatch.setattr(devices_module, "usable_cores", lambda: 8)  # more cores than devices
    line = d2l.device_summary()
    assert "at most 4 ops can compute at the same time (a collective's threads can use" in line
    # read 122: the pool is what TensorFlow reports, not the device count
    assert "one thread from one pool of 4 op threads" in line
    monkeypatch.setattr(devices_module, "_op_threads", lambda: (2, 6))
    line = d2l.device_summary()
    assert "each op runs on 2 threads from one pool of 6 op threads" in line
    assert "at most 6 ops can compute at the same time" in line
    monkeypatch.undo()
    monkeypatch.setattr(devices_module, "available_memory_bytes", lambda: 16 * GiB)
    monkeypatch.setattr(devices_module, "usable_cores", lambda: 2)
    line = d2l.device_summary()
    assert "small machine" not in line
    monkeypatch.setattr(devices_module, "available_memory_bytes", lambda: 2 * GiB)
    assert "small machine (2 usable CPU cores, 2.0 GiB" in d2l.device_summary()


@pytest.mark.parametrize(
    ("gpus", "expected_kind", "expected_count"),
    [(["GPU:0", "GPU:1"], "GPU", 2), (["GPU:0"], "virtual GPU", 4), ([], "logical CPU", 4)],
)
def test_setup_devices_plans_from_the_physical_device_list(
    monkeypatch, gpus, expected_kind, expected_count
):
    configured = []
    monkeypatch.setattr(devices_module, "_plan", None)
    monkeypatch.setattr(devices_module, "_devices", None)
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: list(gpus))
    monkeypatch.setattr(devices_module, "_gpu_memory_mb", lambda index=0: 40_000)
    monkeypatch.setattr(devices_module, "_configure", lambda plan, g: configured.append(plan))
    monkeypatch.setattr(devices_module, "_describe", lambda plan: [plan.kind] * plan.count)
    assert d2l.setup_devices() == [expected_kind] * expected_count
    assert configured == [Plan(expected_kind, expected_count, configured[0].memory_limit_mb)]
    d2l.setup_devices()  # the same request again: no-op
    assert len(configured) == 1
    with pytest.raises(RuntimeError, match="Restart the kernel"):
        d2l.setup_devices(1)


def test_logical_cpu_devices_are_labelled_and_d2l_names_work(devices):
    assert len(devices) == 4 and {d.kind for d in devices} == {"logical CPU"}
    assert "shared with the others" in devices[1].note and "CPU:1" in devices[1].name
    assert d2l.try_all_gpus() == devices
    assert d2l.cpu() == devices[0]
    with d2l.cpu():  # a Device is a context manager, like d2l's tf.device(...)
        x = tf.ones((2, 2))
    assert x.device.endswith("CPU:0")
    with devices[2]:
        y = tf.ones((2, 2)) + 1
    assert y.device.endswith("CPU:2")
    assert "4 logical CPU devices" in d2l.device_summary()


def test_select_devices_names_the_maximum(devices):
    assert d2l.select_devices(2) == devices[:2]
    with pytest.raises(ValueError, match="but 4 are set up: choose 1 to 4"):
        d2l.select_devices(5)


def test_check_fits_refuses_with_needed_and_available(devices):
    check_fits(1 << 20, devices)
    with pytest.raises(ValueError, match=r"needs 4\.0 TiB|needs 4096\.0 GiB") as error:
        check_fits(1 << 40, devices, "a huge run")
    assert "is free" in str(error.value) and "a huge run" in str(error.value)


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(3 * 2**20) == "3.0 MiB"
    assert format_bytes(2**40) == "1024.0 GiB"


def test_two_logical_devices_in_a_fresh_runtime_and_no_op_and_restart_error():
    out = run_python(
        """
        import d2lhelpers as d2l
        devices = d2l.setup_devices(2)
        print(len(devices), [d.kind for d in devices])
        assert d2l.setup_devices(2) is devices and d2l.setup_devices() is devices
        import tensorflow as tf
        print(tf.config.threading.get_intra_op_parallelism_threads(),
              tf.config.threading.get_inter_op_parallelism_threads())
        try:
            d2l.setup_devices(3)
        except RuntimeError as e:
            print("refused:", e)
        """
    )
    assert out.returncode == 0, out.stderr
    assert "2 ['logical CPU', 'logical CPU']" in out.stdout
    assert "\n1 2\n" in out.stdout  # one thread per op, two ops at once
    assert "refused: Devices were already set up as 2 logical CPU devices" in out.stdout
    assert "Restart the kernel, then call d2l.setup_devices(3)" in out.stdout


def test_tensorflow_op_before_setup_gives_a_clear_error():
    out = run_python(
        """
        import d2lhelpers as d2l, tensorflow as tf
        tf.ones(1)  # starts the runtime with TensorFlow's own single CPU device
        d2l.setup_devices()
        """
    )
    assert out.returncode != 0
    assert "already set up by an earlier TensorFlow op" in out.stderr
    assert "Restart the kernel" in out.stderr


def test_importing_tensorflow_first_warns_what_it_costs():
    out = run_python(
        "import warnings; warnings.simplefilter('always')\nimport tensorflow\nimport d2lhelpers\n",
        env={"TF_CPP_MIN_LOG_LEVEL": "3"},
        unset=["TF_ENABLE_ONEDNN_OPTS"],
    )
    assert out.returncode == 0, out.stderr
    assert "TensorFlow was imported before d2lhelpers" in out.stderr
    assert "1.8x one chain" in out.stderr


def test_importing_d2lhelpers_first_sets_tensorflow_environment():
    out = run_python(
        "import os, d2lhelpers\n"
        "print(os.environ['TF_ENABLE_ONEDNN_OPTS'], os.environ['TF_CPP_MIN_LOG_LEVEL'])",
        unset=["TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL"],
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "3"]
