"""Which graph optimisation merges identical ops: run them with switches off, in fresh processes.

TensorFlow reads the classic optimiser's settings once per runtime, so every classic setting gets
its own Python process; Grappler's switches apply to each `tf.function` built after they are set,
so the sets of switches that share a classic setting share a process (3 processes for the 5
sets). Each set runs `n` identical `matmul(x, x)` in a new `tf.function` and counts the MatMul ops
that executed in one call, from a profiler trace (distinct op names, so an op that launches several
kernels counts once). Every process runs on the CPU.

Two optimisers run on a `tf.function`'s graph. Grappler's switches are in `tf.config.optimizer`.
The classic graph optimiser (`OptimizerOptions`: common-subexpression elimination, CSE) has none
there: it reads the eager context's `ConfigProto`, which a fresh process sets before its runtime
starts (`disable_eager_execution()` then `enable_eager_execution(config=...)`: in TensorFlow 2 the
second call alone does nothing). At `opt_level` L1, the default, CSE is forced on, so switching it
off needs L0 too; a control run at L0 with CSE kept on differs from it in that one flag.

Probed on TF 2.21 (10 matmuls of 256x256): each of Grappler's `arithmetic_optimization` switch
and the classic CSE stops the merge on its own; only with both off did all 10 run. That switch
also turns off Grappler's common-subgraph-elimination pass (TensorFlow's `meta_optimizer.cc` adds
that pass only when both are on), so the probe names the switch, not which of the two passes
merges (read 149).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from d2lhelpers.tracing.xspace import events_from_xspace, read_logdir

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
        "Grappler's arithmetic_optimization", ARITHMETIC_OFF, {"arithmetic": False}, "none"
    ),
    "classic_cse": Switch(
        "the classic optimiser's common-subexpression elimination (CSE)",
        CSE_OFF + " (tf.config's documented options have no switch for it)",
        {"level_0": True, "cse": False},
    ),
    "both_control": Switch(
        "Grappler's arithmetic_optimization; classic optimiser at L0 with CSE kept on (control)",
        ARITHMETIC_OFF + "; ConfigProto: opt_level L0, do_common_subexpression_elimination True",
        {"arithmetic": False, "level_0": True, "cse": True},
    ),
    "both": Switch(
        "Grappler's arithmetic_optimization and the classic CSE",
        ARITHMETIC_OFF + "; " + CSE_OFF,
        {"arithmetic": False, "level_0": True, "cse": False},
        "both_control",
        ("arithmetic", "classic_cse"),
    ),
}

_SCRIPT = r"""
import json, os, statistics, sys, time
n, size, logdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
sets = json.loads(sys.argv[4])  # every set shares one classic setting (level_0, cse)
import tensorflow as tf

if sets[0].get("level_0"):
    config = tf.compat.v1.ConfigProto()
    config.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_common_subexpression_elimination = sets[0]["cse"]
    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.enable_eager_execution(config=config)
x = tf.random.stateless_normal((size, size), seed=(0, 0))
seconds, iqrs = [], []
for i, options in enumerate(sets):
    tf.config.optimizer.set_experimental_options(
        {"arithmetic_optimization": options.get("arithmetic", True)}
    )
    run = tf.function(lambda x: [tf.linalg.matmul(x, x) for _ in range(n)])  # built after
    run(x)[-1].numpy()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        run(x)[-1].numpy()
        times.append(time.perf_counter() - start)
    seconds.append(statistics.median(times))
    quartiles = statistics.quantiles(times, n=4, method="inclusive")
    iqrs.append(quartiles[2] - quartiles[0])
    profiler = tf.profiler.experimental
    profiler.start(os.path.join(logdir, str(i)))
    run(x)[-1].numpy()
    profiler.stop()
print(json.dumps({"seconds": seconds, "iqrs": iqrs}))
"""


def classic_setting(switch: str) -> tuple:
    """What a fresh process must fix before its runtime starts: the classic optimiser's setting."""
    options = SWITCHES[switch].options
    return options.get("level_0", False), options.get("cse", True)


@dataclasses.dataclass(frozen=True)
class ProbeRun:
    """One fresh process: what was switched off, how many MatMuls ran of `n`, time per call
    (the median of 5 calls, and their IQR: a `Timed` for the verdicts' noise)."""

    switch: str
    n: int
    executed: int
    seconds: float
    iqr: float = 0.0

    @property
    def median(self) -> float:
        return self.seconds

    @property
    def what(self) -> str:
        return SWITCHES[self.switch].what

    @property
    def how(self) -> str:
        return SWITCHES[self.switch].how

    @property
    def merged(self) -> bool:
        return self.executed < self.n


def probe(switches: str | Sequence[str], n: int, size: int, timeout: float = 120) -> list[ProbeRun]:
    """Run `n` identical size x size matmuls with each set of `switches` off, in one fresh Python
    (they must share a classic setting); count the MatMuls each ran."""
    switches = [switches] if isinstance(switches, str) else list(switches)
    unknown = [s for s in switches if s not in SWITCHES]
    if unknown:
        raise ValueError(f"unknown switch {unknown[0]!r}: choose one of {', '.join(SWITCHES)}")
    if len({classic_setting(s) for s in switches}) != 1:
        raise ValueError(f"{switches} need different classic settings: one process each")
    # Every process on the CPU, so the rows compare like with like (and start without CUDA).
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"}
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    sets = json.dumps([SWITCHES[s].options for s in switches])
    with tempfile.TemporaryDirectory() as logdir:
        out = subprocess.run(
            [sys.executable, "-c", _SCRIPT, str(n), str(size), logdir, sets],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        if out.returncode != 0:
            raise RuntimeError(f"the probe with {switches} off failed:\n{out.stderr[-2000:]}")
        found = json.loads(out.stdout.strip().splitlines()[-1])
        seconds, iqrs = found["seconds"], found["iqrs"]
        runs = []
        for i, switch in enumerate(switches):
            rows = events_from_xspace(read_logdir(f"{logdir}/{i}"), {})
            executed = len({row.op for row in rows if row.kind == "matmul"})
            runs.append(ProbeRun(switch, n, executed, seconds[i], iqrs[i]))
    return runs
