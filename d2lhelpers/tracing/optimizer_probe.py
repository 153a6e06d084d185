"""Which graph optimisation merges identical ops: run them with one switch off, in a fresh process.

TensorFlow reads its optimiser settings once per runtime, so every switch gets its own Python
process. Each one runs `n` identical `matmul(x, x)` and counts the MatMul ops that actually
executed (distinct op names, so an op that launches several kernels counts once): from a
profiler trace of one `tf.function` call (TF2), or from the step statistics of one
`tf.compat.v1.Session.run` (the classic graph optimiser, whose switch TF2 does not expose:
`tf.config.optimizer` sets only Grappler's options). Every process runs on the CPU.

Probed on TF 2.21: the classic optimiser's `do_common_subexpression_elimination` is forced on at
`opt_level` L1 (the default), so switching it off needs L0 too; `L0 with CSE on` is the control
that shows L0 alone changes nothing else that matters.
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

# name -> (what is switched off, how)
SWITCHES = {
    "none": ("nothing", "TF2 tf.function, default settings"),
    "meta_optimizer": (
        "Grappler (its meta-optimizer)",
        "tf.config.optimizer.set_experimental_options({'disable_meta_optimizer': True})",
    ),
    "common_subgraph": (
        "Grappler's common-subgraph elimination",
        "tf.config.optimizer.set_experimental_options({'common_subgraph_elimination': False})",
    ),
    "classic_l0": (
        "the classic optimiser's other passes (control)",
        "v1 Session, Grappler off, opt_level L0, CSE kept on",
    ),
    "classic_cse": (
        "the classic graph optimiser's common-subexpression elimination",
        "v1 Session, Grappler off, opt_level L0, CSE off (TF2's tf.config has no switch for it)",
    ),
}

_SCRIPT = r"""
import json, statistics, sys, time
switch, n, size, logdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
import numpy as np
import tensorflow as tf

def timed(call, runs=3):
    call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)

if switch.startswith("classic"):
    tf.compat.v1.disable_eager_execution()
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    options = config.graph_options.optimizer_options
    options.opt_level = tf.compat.v1.OptimizerOptions.L0
    options.do_common_subexpression_elimination = switch == "classic_l0"
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (size, size))
        ys = [tf.linalg.matmul(x, x) for _ in range(n)]
    feed = {x: np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)}
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        seconds = timed(lambda: session.run(ys, feed))
        meta = tf.compat.v1.RunMetadata()
        trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        session.run(ys, feed, options=trace, run_metadata=meta)
    types = [(s.node_name, s.timeline_label.partition(" = ")[2].partition("(")[0])
             for d in meta.step_stats.dev_stats for s in d.node_stats]
    print(json.dumps({"seconds": seconds, "executed": len({n for n, t in types if "MatMul" in t})}))
else:
    if switch == "meta_optimizer":
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    if switch == "common_subgraph":
        tf.config.optimizer.set_experimental_options({"common_subgraph_elimination": False})
    x = tf.random.stateless_normal((size, size), seed=(0, 0))
    run = tf.function(lambda x: [tf.linalg.matmul(x, x) for _ in range(n)])
    seconds = timed(lambda: run(x)[-1].numpy())
    options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0)
    tf.profiler.experimental.start(logdir, options=options)
    run(x)[-1].numpy()
    tf.profiler.experimental.stop()
    print(json.dumps({"seconds": seconds, "executed": None}))
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
        return SWITCHES[self.switch][0]

    @property
    def how(self) -> str:
        return SWITCHES[self.switch][1]


def probe(switch: str, n: int, size: int, timeout: float = 120) -> ProbeRun:
    """Run `n` identical size x size matmuls in a fresh Python with `switch` off; count them."""
    if switch not in SWITCHES:
        raise ValueError(f"unknown switch {switch!r}: choose one of {', '.join(SWITCHES)}")
    # Every process on the CPU, so the rows compare like with like (and start without CUDA).
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"}
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    with tempfile.TemporaryDirectory() as logdir:
        out = subprocess.run(
            [sys.executable, "-c", _SCRIPT, switch, str(n), str(size), logdir],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        if out.returncode != 0:
            raise RuntimeError(f"the probe with {switch!r} off failed:\n{out.stderr[-2000:]}")
        found = json.loads(out.stdout.strip().splitlines()[-1])
        if found["executed"] is None:  # TF2: count the MatMul rows of the profiler's trace
            spaces = [read_xspace(p) for p in glob.glob(f"{logdir}/plugins/profile/*/*.xplane.pb")]
            rows = events_from_xspace(spaces, {})
            found["executed"] = len({row.op for row in rows if row.kind == "matmul"})
    return ProbeRun(switch, n, found["executed"], found["seconds"])
