"""Every public experiment entry point refuses bad input at once, before starting anything.

A property test (hypothesis): one argument at a time is replaced by an out-of-range or wrong-typed
value (0, negatives, 512.5, NaN, 10**9 and more, strings, None, empty lists, True) and the call
must raise ValueError or TypeError before it builds anything. The examples run in one fresh Python
with an address-space limit, a per-call alarm against hangs, and every builder that makes a
tensor, a graph, a figure or a process (`tests.conftest.BUILDERS`) replaced by a trap, so a missing
check fails the test instead of taking the machine down. How long a refusal takes is not asserted:
that is a time, and depends on the machine.

ENTRY_POINTS is the table to keep up to date when entry points are added or renamed: the name in
`d2lhelpers` (or "module:name" for one the front door does not export), tiny valid keyword
arguments, the arguments that are counts, and those that are sweeps (lists of counts).
KNOWN_FAILING lists those that do not refuse yet (xfail, not strict: remove a name once its entry
point validates with `d2lhelpers.core.checks`).
"""

import json

import pytest

from tests.conftest import BUILDERS, run_python

ENTRY_POINTS = {
    # name: (valid kwargs, count arguments, sweep arguments)
    "setup_devices": ({"count": 2}, ["count"], []),
    "select_devices": ({"count": 1}, ["count"], []),
    "d2lhelpers.lessons.l01_two_devices:run_concurrency": (
        {"size": 64, "n_matmuls": 2, "max_devices": 2},
        ["size", "n_matmuls", "max_devices"],
        [],
    ),
    "run_compute_copy": ({"size": 64, "n_matmuls": 2}, ["size", "n_matmuls"], []),
    "local_copy_cost": ({"sizes": [4096]}, [], ["sizes"]),
    "run_mlp_branches": (
        {"batch": 8, "width": 16, "hidden": 16, "branches": 2},
        ["batch", "width", "hidden", "branches"],
        [],
    ),
    "run_tensor_parallel": (
        {"width": 16, "batch": 8, "n_devices": 2},
        ["width", "batch", "n_devices"],
        [],
    ),
    "run_pipeline_parallel": (
        {"width": 16, "batch": 8, "microbatches": 2, "n_devices": 2},
        ["width", "batch", "microbatches", "n_devices"],
        [],
    ),
    "run_replicas": (
        {"width": 16, "batch": 8, "n_devices": 2},
        ["width", "batch", "n_devices"],
        [],
    ),
    "run_allreduce_sweep": ({"n_devices": 2, "sizes": [4096]}, ["n_devices"], ["sizes"]),
    "run_allreduce_overlap": (
        {"n_devices": 2, "size": 4096, "chain_size": 32, "chain_length": 2},
        ["n_devices", "size", "chain_size", "chain_length"],
        [],
    ),
    "run_allreduce_job": (
        {"n_workers": 2, "sizes": [4096], "repeats": 2},
        ["n_workers", "repeats"],
        ["sizes"],
    ),
    # notebook 06's run_training and run_failure are not in the front door: test_l06 checks them
    "run_training_sweep": (
        {"worker_counts": [1, 2], "width": 16, "batch_per_worker": 8, "steps": 2},
        ["width", "batch_per_worker", "steps"],
        ["worker_counts"],
    ),
    "run_serving": (
        {"layout": "replicas", "n_devices": 2, "width": 16, "n_out": 2},
        ["n_devices", "width", "n_out", "prompt_len", "layers", "slots_per_device"],
        [],
    ),
    "run_load_sweep": (
        {"n_devices": 2, "width": 16, "n_out": 2},
        ["n_devices", "width", "n_out", "prompt_len", "layers", "slots_per_device"],
        [],
    ),
    "run_serving_failure": (
        {"n_devices": 2, "width": 16, "n_out": 2},
        ["n_devices", "width", "n_out", "prompt_len", "layers", "slots_per_device"],
        [],
    ),
    "run_lockstep_comparison": (
        {"n_devices": 2, "width": 16, "n_out": 2},
        ["n_devices", "width", "n_out", "prompt_len", "layers", "slots_per_device"],
        [],
    ),
    "run_pipeline_in_flight": (
        {"n_devices": 2, "width": 16, "n_out": 2, "microbatches": [1]},
        ["n_devices", "width", "n_out", "prompt_len", "layers", "per_microbatch"],
        ["microbatches"],
    ),
    "check_layout_tokens": (
        {"n_devices": 2, "width": 16, "n_out": 2},
        ["n_devices", "width", "layers", "prompt_len", "n_out"],
        [],
    ),
}
KNOWN_FAILING: set[str] = set()  # every entry point refuses bad input at once

_CHILD = r"""
import importlib, inspect, json, multiprocessing, resource, signal, subprocess, sys, time
import d2lhelpers as d2l
from d2lhelpers.core.checks import available_memory_bytes
from hypothesis import HealthCheck, Phase, assume, given, settings, strategies as st

d2l.setup_devices()
# Address space: what TensorFlow has mapped now plus half the free memory, so a missing check
# fails with a MemoryError/ResourceExhausted instead of swapping the machine.
with open("/proc/self/status") as status:
    mapped = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize:"))
_, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (mapped + available_memory_bytes() // 2, hard))
TABLE, BUILDERS = json.loads(sys.argv[1]), json.loads(sys.argv[2])

class Started(BaseException):
    "Something was built: raised where it was, never caught as an Exception."

class Slow(BaseException):
    "The call ran past the hang guard."

def trap(name):
    def trapped(*args, **kwargs):
        raise Started(f"{name} was called before the refusal")
    return trapped

for dotted, names in BUILDERS.items():  # tensorflow.random, multiprocessing.Process: attributes
    top, *rest = dotted.split(".")
    owner = importlib.import_module(top)
    for part in rest:
        owner = getattr(owner, part)
    for name in names:
        setattr(owner, name, trap(f"{dotted}.{name}"))

def alarm(*args):
    raise Slow(f"no refusal within {HANG_S} s: a hang")
HANG_S = 10
signal.signal(signal.SIGALRM, alarm)

BAD_COUNTS = st.one_of(
    st.sampled_from([0, -1, -(10**9), 512.5, float("nan"), float("inf"), True, None, "4", []]),
    st.integers(max_value=0),
    st.integers(min_value=10**9, max_value=10**12),
    st.floats().filter(lambda x: not x.is_integer()),
    st.text(max_size=4),
)
BAD_SWEEPS = st.one_of(
    st.sampled_from([[], (), None, "4096", 4096, [0], [-4], [512.5], [None], [10**12]]),
    st.lists(BAD_COUNTS, min_size=1, max_size=3),
)

def check(name, valid, counts, sweeps):
    module, _, attribute = name.rpartition(":")  # "module:name" for one the front door omits
    entry = getattr(importlib.import_module(module) if module else d2l, attribute, None)
    if entry is None:
        return f"d2lhelpers has no {name}: update ENTRY_POINTS"
    defaults = {k: p.default for k, p in inspect.signature(entry).parameters.items()}
    names = [("count", c) for c in counts] + [("sweep", s) for s in sweeps]

    @settings(max_examples=15, deadline=None, database=None, derandomize=True,
              phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
    @given(st.data())
    def property(data):
        kind, arg = data.draw(st.sampled_from(names))
        bad = data.draw(BAD_COUNTS if kind == "count" else BAD_SWEEPS)
        assume(not (bad is None and defaults.get(arg, 0) is None))  # None is valid there
        signal.setitimer(signal.ITIMER_REAL, HANG_S)
        try:
            entry(**{**valid, arg: bad})
        except (ValueError, TypeError):
            pass
        except Exception as error:
            raise AssertionError(f"{arg}={bad!r}: {type(error).__name__}: {error}"[:300])
        except (Started, Slow) as error:
            raise AssertionError(f"{arg}={bad!r}: {error}") from None
        else:
            raise AssertionError(f"{arg}={bad!r} was accepted")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    try:
        property()
        return None
    except AssertionError as error:
        return str(error).splitlines()[0][:300]
    except BaseException as error:
        return f"{type(error).__name__}: {error}"[:300]

for name, (valid, counts, sweeps) in TABLE.items():
    print("RESULT", json.dumps([name, check(name, valid, counts, sweeps)]), flush=True)
"""


@pytest.fixture(scope="module")
def refusals() -> dict:
    """{name: None when every bad input was refused before building, else the first failure}."""
    done = run_python(
        "import sys\nsys.argv = ['child', "
        + ", ".join(repr(json.dumps(table)) for table in (ENTRY_POINTS, BUILDERS))
        + "]\n"
        + _CHILD,
        timeout=900,
    )
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            name, failure = json.loads(line.removeprefix("RESULT "))
            found[name] = failure
    assert found, f"the property run failed before any entry point:\n{done.stderr[-3000:]}"
    return found


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason="does not refuse yet", strict=False))
        if n in KNOWN_FAILING
        else n
        for n in ENTRY_POINTS
    ],
)
def test_bad_input_is_refused_before_anything_is_built(refusals, name):
    assert name in refusals, f"{name} was not checked (the run stopped early)"
    assert refusals[name] is None, f"{name}: {refusals[name]}"
