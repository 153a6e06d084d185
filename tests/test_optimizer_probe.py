"""The merge probe: each set of switches in a fresh process, executed MatMuls counted."""

import pytest

from d2lhelpers.tracing import optimizer_probe
from d2lhelpers.tracing.optimizer_probe import SWITCHES


def test_unknown_switch_is_refused_before_a_process_starts():
    with pytest.raises(ValueError, match="unknown switch 'grappler'"):
        optimizer_probe.probe("grappler", 3, 32)


def test_each_control_differs_from_its_switch_in_exactly_one_setting():
    controlled = [name for name, switch in SWITCHES.items() if switch.control]
    assert controlled == ["arithmetic", "both"]
    for name in controlled:
        ours, theirs = SWITCHES[name].options, SWITCHES[SWITCHES[name].control].options
        differ = {k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)}
        assert len(differ) == 1, f"{name} and its control differ in {sorted(differ)}"
    for part in SWITCHES["both"].parts:  # "both" is exactly its parts' settings together
        assert SWITCHES[part].options.items() <= SWITCHES["both"].options.items()


def test_identical_matmuls_all_run_only_with_both_optimisers_off_not_in_the_control():
    # Three fresh TensorFlow processes (tiny matrices): what executed, counted from a trace.
    runs = {s: optimizer_probe.probe(s, 3, 32) for s in ("none", "both_control", "both")}
    assert {s: r.executed for s, r in runs.items()} == {"none": 1, "both_control": 1, "both": 3}
    assert all(r.seconds > 0 for r in runs.values())
    assert runs["none"].merged and not runs["both"].merged
    assert "CSE" in runs["both"].what and "do_common_subexpression_elimination False" in (
        runs["both"].how
    )
