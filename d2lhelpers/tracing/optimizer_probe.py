"""Which graph optimisation merges identical ops: run them with switches off, in fresh processes.

TensorFlow reads its optimiser settings once per runtime, so every set of switches gets its own
Python process. Each one runs `n` identical `matmul(x, x)` in a `tf.function` and counts the MatMul
ops that executed in one call, from a profiler trace (distinct op names, so an op that launches
several kernels counts once). Every process runs on the CPU.

Two optimisers run on a `tf.function`'s graph. Grappler's switches are in `tf.config.optimizer`.
The classic graph optimiser (`OptimizerOptions`: common-subexpression elimination, CSE) has none
there: it reads the eager context's `ConfigProto`, which a fresh process sets before its runtime
starts (`disable_eager_execution()` then `enable_eager_execution(config=...)`: in TensorFlow 2 the
second call alone does nothing). At `opt_level` L1, the default, CSE is forced on, so switching it
off needs L0 too; a control run at L0 with CSE kept on differs from it in that one flag.

Probed on TF 2.21 (10 matmuls of 256x256): each of Grappler's arithmetic optimizer and the classic
CSE merges them on its own; only with both off did all 10 run.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import subprocess
import sys
import tempfile

from d2lhelpers.tracing.xspace import events_from_xspace, read_xspace

ARITHMETIC_OFF = "tf.config.optimizer.set_experimental_options({'arithmetic_optimization': False})"
CSE_OFF = "ConfigProto: opt_level L0, do_common_subexpression_elimination False"


@dataclasses.dataclass(frozen=True)
class Switch:
    """What one fresh process switches off, how, and the run it is compared with (its control:
    the same settings but the one thing under test)."""

    what: str
    how: str
    options: dict
    control: str | None = None
    parts: tuple[str, ...] = ()  # the single switches this one combines


SWITCHES = {
    "none": Switch("nothing", "TF2 tf.function, default settings", {}),
    "arithmetic": Switch(
        "Grappler's arithmetic optimizer", ARITHMETIC_OFF, {"arithmetic": False}, "none"
    ),
    "classic_cse": Switch(
        "the classic optimiser's common-subexpression elimination (CSE)",
        CSE_OFF + " (tf.config has no switch for it)",
        {"level_0": True, "cse": False},
    ),
    "both_control": Switch(
        "Grappler's arithmetic optimizer; classic optimiser at L0 with CSE kept on (control)",
        ARITHMETIC_OFF + "; ConfigProto: opt_level L0, do_common_subexpression_elimination True",
        {"arithmetic": False, "level_0": True, "cse": True},
    ),
    "both": Switch(
        "Grappler's arithmetic optimizer and the classic CSE",
        ARITHMETIC_OFF + "; " + CSE_OFF,
        {"arithmetic": False, "level_0": True, "cse": False},
        "both_control",
        ("arithmetic", "classic_cse"),
    ),
}

_SCRIPT = r"""
import json, statistics, sys, time
n, size, logdir, options = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
import tensorflow as tf

if options.get("level_0"):
    config = tf.compat.v1.ConfigProto()
    config.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_common_subexpression_elimination = options["cse"]
    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.enable_eager_execution(config=config)
if "arithmetic" in options:
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": options["arithmetic"]})
x = tf.random.stateless_normal((size, size), seed=(0, 0))
run = tf.function(lambda x: [tf.linalg.matmul(x, x) for _ in range(n)])
run(x)[-1].numpy()
times = []
for _ in range(5):
    start = time.perf_counter()
    run(x)[-1].numpy()
    times.append(time.perf_counter() - start)
profiler = tf.profiler.experimental
profiler.start(logdir, options=profiler.ProfilerOptions(host_tracer_level=2, python_tracer_level=0))
run(x)[-1].numpy()
profiler.stop()
print(json.dumps({"seconds": statistics.median(times)}))
"""


@dataclasses.dataclass(frozen=True)
class ProbeRun:
    """One fresh process: what was switched off, how many MatMuls ran of `n`, time per call."""

    switch: str
    n: int
    executed: int
    seconds: float

    @property
    def what(self) -> str:
        return SWITCHES[self.switch].what

    @property
    def how(self) -> str:
        return SWITCHES[self.switch].how

    @property
    def merged(self) -> bool:
        return self.executed < self.n


def probe(switch: str, n: int, size: int, timeout: float = 120) -> ProbeRun:
    """Run `n` identical size x size matmuls in a fresh Python with `switch` off; count them."""
    if switch not in SWITCHES:
        raise ValueError(f"unknown switch {switch!r}: choose one of {', '.join(SWITCHES)}")
    # Every process on the CPU, so the rows compare like with like (and start without CUDA).
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"}
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    options = json.dumps(SWITCHES[switch].options)
    with tempfile.TemporaryDirectory() as logdir:
        out = subprocess.run(
            [sys.executable, "-c", _SCRIPT, str(n), str(size), logdir, options],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        if out.returncode != 0:
            raise RuntimeError(f"the probe with {switch!r} off failed:\n{out.stderr[-2000:]}")
        seconds = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
        spaces = [read_xspace(p) for p in glob.glob(f"{logdir}/plugins/profile/*/*.xplane.pb")]
        rows = events_from_xspace(spaces, {})
    executed = len({row.op for row in rows if row.kind == "matmul"})
    return ProbeRun(switch, n, executed, seconds)
