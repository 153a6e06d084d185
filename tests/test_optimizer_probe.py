"""The merge probe: each switch in a fresh process, executed MatMuls counted (tiny sizes)."""

import pytest

from d2lhelpers.tracing import optimizer_probe


def test_unknown_switch_is_refused_before_a_process_starts():
    with pytest.raises(ValueError, match="unknown switch 'grappler'"):
        optimizer_probe.probe("grappler", 3, 32)


def test_identical_matmuls_merge_by_default_and_all_run_with_the_classic_cse_off():
    merged = optimizer_probe.probe("none", 3, 32)  # counted from a profiler trace (TF2)
    unmerged = optimizer_probe.probe("classic_cse", 3, 32)  # from v1 step statistics
    assert (merged.executed, unmerged.executed) == (1, 3)
    assert merged.seconds > 0 and unmerged.seconds > 0
    assert "common-subexpression" in unmerged.what and "L0" in unmerged.how
