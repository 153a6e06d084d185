"""The one-core check (`make one-core`): its reading of outputs, and that one core is inherited.

The full run of every notebook is `make one-core` (minutes); here its checks are tested on
made-up outputs, and one tiny notebook shows that the kernel and its child processes see one core.
"""

import nbformat
import pytest

from tests import one_core
from tests.one_core import contradictions, html_to_text, output_texts


@pytest.mark.parametrize(
    "text",
    [
        "hidden by overlap: 288% of min(run, copy)",
        "traced overlap: CPU:0 170%",
        "efficiency: -5% of the ideal",
        "overlapped (one function), ideal max(run, copy): 30.0 ms: 0.94x ideal",
        "chain: 1.0 ms, 111.6 GFLOP/s = 1.35 of the peak 80.0 GFLOP/s",
        "chain: 1.0 ms = 1.08 of the peak 80.0 GFLOP/s",  # no fixed tolerance: its noise, or a flag
        "2 devices together: 206.0 GFLOP/s = 1.03 of the usable cores' baseline 200.0 GFLOP/s",
        f"{one_core.REFERENCE_TITLE}: a\nx  1.0\n\n2 chains on 2 cores",  # after it
        "4 logical CPU devices sharing 2 CPU cores (no GPU)",
        "share this machine's 2 usable CPU cores",
        "each runs one op on one thread, so at most 2 can compute at the same time.",
        "from one pool of 4 op threads they share, so at most 2 can compute at the same time",
        "ERROR ValueError: size must be at least 1",
        "is another program using the cores? (load average now: 4.4 on 2 cores)",
        "hidden: 8% of the shorter part\ntraced: at the same time for CPU:0 100%, CPU:1 100%",
        "the bubble: 139% ±273%",  # the share beside its noise is still read
        "measured bubble 105% (-5%/+4%) of the devices' time",  # and beside an asymmetric band
        "Not a result: overlapped came out below its ideal\nOne after the other took 38 ms: it "
        "matches run + copy - launch, as the worked answer says.",
        "hidden: (sum - launch - both) / min  85% ± 31%  ceiling 75% = 1 - launch / min",
        "hiding 80% of the shorter part (at most 75%: 1 - launch / min(all-reduce, compute)).",
    ],
)
def test_a_contradiction_is_found(text):
    assert len(contradictions(text, cores=1)) == 1


@pytest.mark.parametrize(
    "text",
    [
        "hidden by overlap: 91% of min(run, copy)",
        "hidden by overlap: 288% of min(run, copy)\nWARNING: hidden fraction of 288%: impossible",
        "overlapped: 0.94x ideal  WARNING: faster than the ideal: impossible, so not a result",
        "one after the other: 1.00x ideal",
        "chain: 1.0 ms = 1.03 of the peak 80.0 GFLOP/s (above it by less than the noise of 6%)",
        "= 1.03 of the usable cores' baseline 200.0 GFLOP/s; at best match it, within the noise",
        f"{one_core.REFERENCE_TITLE}: 4 CPUs · TF\nconcurrent 3 / 1  1.65  (3 > 2 cores)",
        "4 logical CPU devices sharing 1 usable CPU core (no GPU): at most 1 can compute at once",
        "[4 logical CPU devices sharing 2 CPU cores · TensorFlow 2.21.0] concurrent: 1.02",
        "the seed's 2 GPUs took 0.0869 s; 150% of one",  # no share word: not a share
        "hidden: 33% of min(run, copy)\ntraced overlapped call: copies ran for 56% of the shorter",
        "hidden: 8%\ntraced: at the same time for 100%\nthey disagree: one core takes turns",
        "(2 stages on 1 cores: at most 1 stages compute at once)",
        "hidden: (sum - launch - both) / min  70% ± 31%  ceiling 75% = 1 - launch / min",
        "hiding 50% of the shorter part (at most 75%: 1 - launch / min(all-reduce, compute)).",
        "hidden  85% ± 31%  ceiling 75%\nWARNING: above its ceiling: not a result",
        # a noise above 100% is a spread, not a share (make one-core at 7ea8ef3, notebook 07)
        "n = 2 stages (GPipe's bubble); one device's steps: 1.52 ms ±273%, 2.21 ms ± 139%",
        # an asymmetric band is its noise, not a negative share (make one-core at a20048d)
        "measured bubble 53% (-5%/+4%) of the devices' time; GPipe model (p-1)/(m+p-1) = 11%",
    ],
)
def test_a_consistent_output_passes(text):
    assert contradictions(text, cores=1) == []


def test_two_cores_are_fine_on_a_two_core_process():
    assert contradictions("sharing 2 usable CPU cores, at most 2 can compute", cores=2) == []
    assert contradictions("at most 4 can compute at the same time", cores=2) != []


def test_html_tables_read_as_lines():
    text = html_to_text(
        "<p><b>Hidden</b></p><table><tr><th>what</th><th>share</th></tr>"
        "<tr><td>hidden</td><td>288%</td></tr></table><p>a &amp; b</p>"
    )
    assert "hidden  288%" in text.splitlines() and "a & b" in text
    assert contradictions(text) != []


def test_outputs_of_every_kind_are_read():
    notebook = {
        "cells": [
            {"cell_type": "markdown", "source": "100% sure"},
            {"cell_type": "code", "outputs": [{"output_type": "stream", "text": ["a\n", "b"]}]},
            {
                "cell_type": "code",
                "outputs": [
                    {
                        "output_type": "execute_result",
                        "data": {"text/plain": "x", "text/html": "<p>y</p>"},
                    },
                    {"output_type": "display_data", "data": {"text/plain": "z"}},
                    {"output_type": "error", "ename": "ValueError", "evalue": "bad"},
                ],
            },
        ]
    }
    assert output_texts(notebook) == [
        (2, "a\nb"),
        (3, "y"),
        (3, "z"),
        (3, "ERROR ValueError: bad"),
    ]


def test_the_kernel_and_its_children_see_one_core(tmp_path):
    code = (
        "import os, subprocess, sys\n"
        "print('kernel', len(os.sched_getaffinity(0)))\n"
        "child = 'import os; print(len(os.sched_getaffinity(0)))'\n"
        "print('child', subprocess.run([sys.executable, '-c', child], capture_output=True, "
        "text=True).stdout.strip())"
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    path = tmp_path / "cores.ipynb"
    nbformat.write(notebook, path)
    executed, _ = one_core.run_on_one_core(path, timeout=300)
    assert output_texts(executed) == [(1, "kernel 1\nchild 1\n")]


def test_the_baseline_is_one_number_per_run_unless_measured_again():
    first = (
        3,
        "Fair baseline: the usable cores (/CPU:0, default) reach 167.4 GFLOP/s (noise 2%)",
    )
    same = (30, "2 devices: 160.0 GFLOP/s = 0.96 of the usable cores' baseline 167.4 GFLOP/s")
    other = (30, "2 devices: 160.0 GFLOP/s = 0.91 of the usable cores' baseline 175.2 GFLOP/s")
    reference = (
        32,
        f"{one_core.REFERENCE_TITLE}: x\nper-device / baseline 213.7 GFLOP/s",
    )
    assert one_core.baseline_drift([first, same, reference]) == []
    (problem,) = one_core.baseline_drift([first, other])
    assert problem.startswith("cell 30: the baseline is 175.2 GFLOP/s here, 167.4 GFLOP/s before")
    explained = (30, other[1] + "\nthe baseline was measured again: the first was busy")
    assert one_core.baseline_drift([first, explained]) == []
    # notebook 01's verdict, as printed, with one device set aside above its own peak: the rates
    # after the word 'baseline' on its lines are the baseline's only (a 109.2 after it was read
    # as a second baseline, make one-core at ad7343f)
    from d2lhelpers.lessons import l01_two_devices as l01
    from d2lhelpers.timing.benchmark import Measurement

    def rate(label, flops, peak):
        return Measurement(label, [1.0], work=flops, peak=peak)

    printed = l01.baseline_verdict(
        rate("both", 1.6e11, 3.4e11), rate("one", 1.092e11, 1.034e11), {"flops_per_s": 1.674e11},
        "logical CPU",
    )  # fmt: skip
    assert "1.06 of its own measured peak" in printed
    assert one_core.baseline_drift([first, (33, printed)]) == []
    # make one-core at 86db1cc: a far-beyond-noise warning names the cause '(peak or baseline)'
    # and then the peak's rate: that rate is not a baseline
    from d2lhelpers.timing.benchmark import measurement_warnings

    (far,) = measurement_warnings(Measurement("r", [1.0] * 3, work=50e9, peak=10e9))
    assert "(peak or baseline)" in far and "the peak 10.0 GFLOP/s" in far
    assert one_core.baseline_drift([first, (16, far), same]) == []
    # make one-core at 6dffe70: a baseline measured again names the stale cached one after it
    # (205.5 now, 171.3 cached): the one used is the first, which later cells print
    remeasured = (
        3,
        "Fair baseline: the usable cores reach 205.5 GFLOP/s (noise 5%) (measured in this run; "
        "the cached baseline, 171.3 GFLOP/s measured 08:40, was below this run's device peak, so "
        "it was measured again).",
    )
    later = (34, "2 devices: 186.9 GFLOP/s = 0.91 of the usable cores' baseline 205.5 GFLOP/s")
    assert one_core.baseline_drift([remeasured, later]) == []
    stale = (34, "2 devices: 160.0 GFLOP/s = 0.93 of the usable cores' baseline 171.3 GFLOP/s")
    assert one_core.baseline_drift([remeasured, stale]) != []
