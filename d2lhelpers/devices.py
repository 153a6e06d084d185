"""Set up N devices once, and say what each one really is.

TensorFlow fixes its devices and thread pools when its runtime starts (the first op, or the first
`list_logical_devices`), so the set-up happens once, before that: N real GPUs if there are N;
else N virtual GPUs carved from one chip; else N logical CPU devices, each op on one thread and N
ops at a time. Later calls with the same request are no-ops; a different one needs a restart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess

import tensorflow as tf

from d2lhelpers.core.checks import MEMORY_SHARE, available_memory_bytes, require_count
from d2lhelpers.core.units import GiB, cores_phrase, format_bytes, plural, usable_cores

DEFAULT_COUNT = 4  # sliders go from 1 to this on CPU-only machines and on one GPU
MAX_CPU_COUNT = 8
LOGICAL_CPUS_PER_CORE = 2  # the cap: 2 logical CPUs per usable core (MAX_CPU_COUNT at least)
MAX_VIRTUAL_GPUS = 8  # more slices of one chip teach nothing more, and each needs memory
MIN_VIRTUAL_GPU_MB = 256  # a virtual GPU smaller than this cannot hold a lesson's matrices
UNKNOWN_GPU_MB = 8 * 1024  # assumed chip memory when nvidia-smi cannot tell us
SMALL_MEMORY_BYTES = 3 * GiB  # below this much available memory: a small machine


def small_machine(cores: int | None = None, available_bytes: int | None = None) -> bool:
    """One usable core, or under `SMALL_MEMORY_BYTES` available: notebook 06's multi-process runs
    pick smaller defaults (`machine_defaults`)."""
    cores = usable_cores() if cores is None else cores
    available = available_memory_bytes() if available_bytes is None else available_bytes
    return cores <= 1 or available < SMALL_MEMORY_BYTES


def max_device_count(num_physical_gpus: int, cpu_cores: int | None = None, gpu_memory_mb=None):
    """The most devices `plan_devices` sets up: the real GPUs; `MAX_VIRTUAL_GPUS` slices of one
    chip (fewer if a slice would be under `MIN_VIRTUAL_GPU_MB`); 2 logical CPUs per usable core,
    and `MAX_CPU_COUNT` at least."""
    if num_physical_gpus >= 2:
        return num_physical_gpus
    if num_physical_gpus == 1:
        chip_mb = gpu_memory_mb or UNKNOWN_GPU_MB
        return max(1, min(MAX_VIRTUAL_GPUS, int(chip_mb * 0.9) // MIN_VIRTUAL_GPU_MB))
    cores = cpu_cores or usable_cores()
    return max(MAX_CPU_COUNT, LOGICAL_CPUS_PER_CORE * cores)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to set up: `count` devices of one kind ('GPU', 'virtual GPU' or 'logical CPU')."""

    kind: str
    count: int
    memory_limit_mb: int | None = None  # per virtual GPU


def plan_devices(
    num_physical_gpus: int,
    count: int | None = None,
    gpu_memory_mb: int | None = None,
    cpu_cores: int | None = None,
) -> Plan:
    """Choose real GPUs, virtual GPUs or logical CPUs for `count` devices (None: a default).

    A count above `max_device_count` is refused at once, naming the cap: each device costs
    memory and threads when TensorFlow's runtime starts (a million logical CPUs grew to 6 GB).
    """
    if count is not None:
        require_count("count", count)
        cap = max_device_count(num_physical_gpus, cpu_cores, gpu_memory_mb)
        if count > cap and num_physical_gpus != 1:
            if num_physical_gpus >= 2:
                raise ValueError(
                    f"{count} devices asked for, but this machine has {num_physical_gpus} GPUs: "
                    f"choose at most {num_physical_gpus}"
                )
            raise ValueError(
                f"{count} logical CPU devices asked for, but at most {cap} may be set up "
                f"({LOGICAL_CPUS_PER_CORE} per usable CPU core, {MAX_CPU_COUNT} at least): "
                f"choose at most {cap}"
            )
        if count > cap:
            raise ValueError(
                f"{count} virtual GPUs asked for, but at most {cap} may be carved from this chip "
                f"({MAX_VIRTUAL_GPUS} at most, each with {MIN_VIRTUAL_GPU_MB} MiB or more): "
                f"choose at most {cap}"
            )
    if num_physical_gpus >= 2:  # a count above them was refused above (their cap)
        return Plan("GPU", count or num_physical_gpus)
    if num_physical_gpus == 1:
        count = count or DEFAULT_COUNT
        if count == 1:
            return Plan("GPU", 1)
        chip_mb = gpu_memory_mb or UNKNOWN_GPU_MB
        # Leave a tenth of the chip for the CUDA context and the allocator's own needs.
        return Plan("virtual GPU", count, memory_limit_mb=int(chip_mb * 0.9) // count)
    cores = cpu_cores or usable_cores()
    return Plan("logical CPU", count or max(DEFAULT_COUNT, min(cores, MAX_CPU_COUNT)))


@dataclasses.dataclass
class Device:
    """One set-up device: `name` goes into `tf.device(...)`; `note` says what it really is.

    Usable as a context manager, as d2l uses `tf.device(...)`: `with d2l.cpu(): ...`.
    """

    name: str
    kind: str
    index: int
    note: str
    memory_bytes: int | None = None  # this device's own memory; None when shared with the host
    _scopes: list = dataclasses.field(default_factory=list, repr=False, compare=False)

    def __enter__(self):
        scope = tf.device(self.name)
        self._scopes.append(scope)
        return scope.__enter__()

    def __exit__(self, *exc):
        return self._scopes.pop().__exit__(*exc)

    def __str__(self):
        return f"{self.name}: {self.note}"


_plan: Plan | None = None
_devices: list[Device] | None = None


def setup_devices(count: int | None = None) -> list[Device]:
    """Set up `count` devices (None: all GPUs, else 4 virtual GPUs or logical CPUs) and return them.

    Must run before TensorFlow's first op. Asking again for the same set-up returns the same
    devices; asking for a different one raises, because TensorFlow cannot change it afterwards.
    """
    global _plan, _devices
    if _plan is not None and count in (None, _plan.count):
        return _devices
    gpus = tf.config.list_physical_devices("GPU")
    plan = plan_devices(len(gpus), count, _gpu_memory_mb() if len(gpus) == 1 else None)
    if _plan is not None:
        raise RuntimeError(_restart_message(_plan, plan))
    try:
        _configure(plan, gpus)
    except RuntimeError as error:  # the runtime already started, with some other set-up
        raise RuntimeError(_restart_message(None, plan)) from error
    _plan, _devices = plan, _describe(plan)
    return _devices


def _restart_message(old: Plan | None, new: Plan) -> str:
    now = f"as {old.count} {old.kind} devices" if old else "by an earlier TensorFlow op"
    return (
        f"Devices were already set up {now}; TensorFlow cannot change its devices once its "
        f"runtime has started. Restart the kernel, then call d2l.setup_devices({new.count}) "
        f"before any other TensorFlow code."
    )


def _configure(plan: Plan, gpus: list) -> None:
    if plan.kind == "logical CPU":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(plan.count)]
        )
        # One thread per op, N ops at once from one shared pool: about one core per device.
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(plan.count)
    elif plan.kind == "virtual GPU":
        tf.config.set_logical_device_configuration(
            gpus[0],
            [
                tf.config.LogicalDeviceConfiguration(memory_limit=plan.memory_limit_mb)
                for _ in range(plan.count)
            ],
        )
    else:
        tf.config.set_visible_devices(gpus[: plan.count], "GPU")
    # Starting the runtime here proves the set-up took, and fixes it.
    kind = "CPU" if plan.kind == "logical CPU" else "GPU"
    found = len(tf.config.list_logical_devices(kind))
    if found != plan.count:
        raise RuntimeError(f"asked for {plan.count} {kind} devices, TensorFlow has {found}")


def _op_threads() -> tuple[int, int]:
    """(threads per op, ops at once) as TensorFlow reports them, not as `_configure` asked
    (read 122: the pool's size was printed from the device count)."""
    return (
        tf.config.threading.get_intra_op_parallelism_threads(),
        tf.config.threading.get_inter_op_parallelism_threads(),
    )


def _threads(n: int) -> str:
    return "one thread" if n == 1 else plural(n, "thread")


def _describe(plan: Plan) -> list[Device]:
    cores = usable_cores()
    devices = []
    if plan.kind == "logical CPU":
        per_op, pool = _op_threads()
        for i, logical in enumerate(tf.config.list_logical_devices("CPU")):
            note = (
                f"logical CPU {i} of {plan.count}: each op on {_threads(per_op)}, from "
                f"a pool of {pool} shared with the others, as are {cores_phrase(cores)} and the "
                "host's memory"
            )
            devices.append(Device(logical.name, plan.kind, i, note))
        return devices
    chip = _gpu_model_name()
    for i, logical in enumerate(tf.config.list_logical_devices("GPU")):
        if plan.kind == "virtual GPU":
            note = (
                f"virtual GPU {i} of {plan.count} carved from one {chip}: its own "
                f"{plan.memory_limit_mb} MiB, but it shares the chip's SMs and memory bandwidth"
            )
            memory = plan.memory_limit_mb * 2**20
        else:
            memory_mb = _gpu_memory_mb(i)
            note = f"physical GPU {i}: {chip}"
            memory = memory_mb * 2**20 if memory_mb else None
        devices.append(Device(logical.name, plan.kind, i, note, memory))
    return devices


def _nvidia_smi(query: str, index: int) -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", f"-i={index}"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout.strip() or None
    return None


def _gpu_memory_mb(index: int = 0) -> int | None:
    value = _nvidia_smi("memory.total", index)
    return int(value) if value and value.isdigit() else None


def _gpu_model_name() -> str:
    return _nvidia_smi("name", 0) or "GPU"


# d2l-compatible names: the seed's code runs with `import d2lhelpers as d2l`.


def try_all_gpus() -> list[Device]:
    """All set-up devices: GPUs (real or virtual), or else the logical CPU devices.

    d2l returns `[cpu()]` here, which would make the seed's `devices[1]` fail on a CPU-only
    machine; these are N >= 2 logical CPU devices instead, each labelled as what it is.
    """
    return list(setup_devices())


def cpu() -> Device:
    """The CPU: on a CPU-only machine, logical CPU device 0."""
    devices = setup_devices()
    if devices[0].kind == "logical CPU":
        return devices[0]
    name = tf.config.list_logical_devices("CPU")[0].name
    return Device(name, "CPU", 0, f"the host CPU ({cores_phrase()})")


def select_devices(count: int) -> list[Device]:
    """The first `count` set-up devices, or a clear error naming how many there are."""
    devices = setup_devices()
    if not 1 <= count <= len(devices):
        raise ValueError(
            f"{count} devices asked for, but {len(devices)} are set up: choose 1 to "
            f"{len(devices)} (more needs d2l.setup_devices(N) after a kernel restart)"
        )
    return devices[:count]


def device_summary() -> str:
    """One line: how many devices this kernel has, what they really are, and, on a small machine
    (`small_machine()`), that notebook 06 picks smaller defaults."""
    devices = setup_devices()
    kind, count, cores = devices[0].kind, len(devices), usable_cores()
    if kind == "logical CPU":
        # read 89: the threads are as configured (setup_devices), and a collective's
        # transfers run on TensorFlow's own collective threads, not in the op pool
        per_op, pool = _op_threads()
        at_once = (
            f"so at most {cores} can compute at the same time, one per core"
            if cores <= pool
            else f"so at most {pool} ops can compute at the same time (a collective's threads "
            "can use the other cores)"
        )
        line = (
            f"{count} logical CPU devices sharing {cores_phrase(cores)} (no GPU): as configured "
            f"here, each op runs on {_threads(per_op)} from one pool of {pool} op "
            "threads the devices "
            "share, and a collective's transfers on TensorFlow's own collective threads "
            "(its source: the collective executor's work queue; not traced here); "
            f"{at_once}."
        )
    elif kind == "virtual GPU":
        line = f"{count} virtual GPUs carved from one {_gpu_model_name()}: they share its SMs."
    else:
        line = f"{count} physical GPUs ({_gpu_model_name()})."
    if small_machine(cores):
        memory = format_bytes(available_memory_bytes())
        line += (
            # read 122: only notebook 06 acts on it, so the line names it
            f" This is a small machine ({cores_phrase(cores)}, {memory} of memory available): "
            "notebook 06's multi-process runs pick smaller defaults (the package's design, "
            "`machine_defaults`; notebook 06 prints the defaults it picked)."
        )
    return line


def free_memory_bytes(device: Device) -> int:
    """Memory still free for `device`: its own for a GPU, the host's for a logical CPU."""
    if device.memory_bytes is None:
        return _host_available_bytes()
    used = tf.config.experimental.get_memory_info(device.name)["current"]
    return device.memory_bytes - used


def _host_available_bytes() -> int:
    """The host memory this process could still get (`admission.available_memory_bytes`)."""
    return available_memory_bytes()


def check_fits(bytes_per_device: int, devices: list[Device], what: str = "this run") -> None:
    """Refuse, before anything is allocated, a run whose buffers would not fit.

    Devices that share memory (logical CPUs share the host's) need the sum; the check keeps
    what `MEMORY_SHARE` leaves of the free memory for everything else.
    """
    shared = [d for d in devices if d.memory_bytes is None]
    groups = [(shared, bytes_per_device * len(shared))] if shared else []
    groups += [([d], bytes_per_device) for d in devices if d.memory_bytes is not None]
    for group, needed in groups:
        free = free_memory_bytes(group[0])
        if needed > MEMORY_SHARE * free:
            where = "the host's shared memory" if group is shared else group[0].name
            raise ValueError(
                f"{what} needs {format_bytes(needed)} on {where}, but only {format_bytes(free)} "
                f"is free (at most {format_bytes(MEMORY_SHARE * free)} may be used): choose a "
                "smaller size."
            )


def on_gpu() -> bool:
    """Whether the set-up devices are GPUs (real or virtual): panels then pick larger defaults."""
    return setup_devices()[0].kind != "logical CPU"
