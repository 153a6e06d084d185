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


def test_sets_that_need_different_classic_settings_are_refused_in_one_process():
    with pytest.raises(ValueError, match="different classic settings"):
        optimizer_probe.probe(["none", "both"], 3, 32)


def test_identical_matmuls_all_run_only_with_both_optimisers_off_not_in_the_control():
    # Two fresh TensorFlow processes (tiny matrices): what executed, counted from a trace. The
    # first runs two sets (default, then Grappler's arithmetic_optimization off, both merged), so a
    # Grappler switch set between two functions of one process takes effect on the second.
    runs = {r.switch: r for r in optimizer_probe.probe(["none", "arithmetic"], 3, 32)}
    runs |= {r.switch: r for r in optimizer_probe.probe(["both_control"], 3, 32)}
    runs |= {r.switch: r for r in optimizer_probe.probe("both", 3, 32)}
    assert runs["arithmetic"].executed == 1  # the classic CSE, still on, merges them alone
    executed = {s: r.executed for s, r in runs.items()}
    assert executed == {"none": 1, "arithmetic": 1, "both_control": 1, "both": 3}
    assert all(r.seconds > 0 for r in runs.values())
    assert runs["none"].merged and not runs["both"].merged
    assert "CSE" in runs["both"].what and "do_common_subexpression_elimination False" in (
        runs["both"].how
    )
