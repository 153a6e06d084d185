"""Notebook 02's result: run, copy, and both in one function, each beside its ideal, with noise.

For the chain computed on the worker and its results copied to the driver:

    ideal copy                                = its bytes at raw TCP's rate over the same link
    ideal one after the other (one function) = run + copy - launch
    ideal overlapped                          = max(run, copy)
    hidden = (run + copy - launch - overlapped) / min(run, copy)

One function pays one launch (an RPC to the worker and back, timed as the same function on 1x1
matrices) where the separate run and copy calls paid two, so the saved launch is not counted as
hidden copy time. An overlapped call cannot take less than max(run, copy), so the hidden share's
ceiling is (run + copy - launch - max(run, copy)) / min(run, copy) = 1 - launch / min(run, copy):
a share above it is the same impossibility as an overlapped time below max(run, copy), and is
checked as that one comparison. Every comparison carries its noise (`verdicts.noise_of`: the
IQR, 5% of the median at least).
"""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt

from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    GB,
    cores_phrase,
    format_bytes,
    format_rate,
    format_seconds,
    ratio_beside,
)
from d2lhelpers.core.verdicts import (
    NOISE_FLOOR,
    TwoParts,
    compare,
    how_below_ideal,
    impossible,
    noise_of,
    parts_between_runs,
    ratio_noise,
    took_turns,
)
from d2lhelpers.processes.tf_servers import (
    BOTH_TRACED,
    HOST,
    copies_after_matmuls_s,
    traced_overlap,
)
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.tracing.timeline import OpEvent, plot_timeline


@dataclasses.dataclass(frozen=True)
class BelowIdeal:
    """A time below its ideal: `beyond_noise` (impossible) or inside noise too large to tell."""

    what: str
    sentence: str
    beyond_noise: bool


@dataclasses.dataclass
class ComputeCopyResult(TwoParts, Reported):
    """Run, copy, launch, and both in one function (forced one after the other, overlapped)."""

    sum_name = "run + copy - launch"  # not a field: how `TwoParts` writes the ideal

    size: int
    n_matmuls: int  # the chain's length asked for
    matmuls: int  # MatMul ops in the run's graph (n_matmuls, unless the chain was edited)
    overlap: bool
    nbytes: int  # the results copied
    run: Measurement
    copy: Measurement
    launch: Measurement  # run_and_copy on 1x1 matrices: a call's fixed cost
    sequential: Measurement  # one function, copies held until the last matmul
    overlapped: Measurement | None  # one function, copies as soon as each result is ready
    link: Measurement  # raw TCP over the same link, in the copies' direction, timed in turns
    rows: list[OpEvent]  # one traced call of the overlapped (or, without overlap, sequential) run
    trace_source: str  # BOTH_TRACED (one clock) or the driver's side only
    worker_device: str
    worker_cores: int | None = None  # the cores the worker process may use; None: not known

    # --- ideals and their noise -----------------------------------------------------------------

    def plot(self):
        """Bars of each time and one traced call's timeline (`plot_compute_copy`)."""
        return plot_compute_copy(self)

    @property
    def parts(self) -> tuple[Measurement, Measurement]:
        return self.run, self.copy

    @property
    def link_peak(self) -> float:
        """Raw TCP's rate over the link, B/s: the most gRPC's copies can reach."""
        return self.link.rate

    @property
    def ideal_copy(self) -> float:
        """The copy's bytes at raw TCP's rate."""
        return self.nbytes / self.link_peak

    @property
    def ideal_copy_noise(self) -> float:
        return noise_of(self.link) * self.ideal_copy / self.link.median

    @property
    def combined(self) -> Measurement:
        """The run whose hidden share is reported: overlapped if run, else sequential."""
        return self.overlapped if self.overlapped is not None else self.sequential

    @property
    def copy_rate(self) -> float:
        """Bytes per second the copy moved over the link."""
        return self.nbytes / self.copy.median

    @property
    def traced_overlap(self) -> float:
        return traced_overlap(self.rows, self.worker_device, HOST)

    # --- what the numbers say: every sentence below comes from `below_ideal()` -------------------

    def below_ideal(self) -> list[BelowIdeal]:
        """Each time below its ideal by more than `NOISE_FLOOR`: beyond the noise, impossible;
        inside it, too noisy to be a result. Empty when every time is plausible."""
        found = [
            self._below(
                self.copy, self.ideal_copy, self.ideal_copy_noise, "copy", "at raw TCP's rate"
            ),
            self._below(
                self.sequential,
                self.ideal_sequential,
                self.ideal_sequential_noise,
                "one after the other",
                "run + copy - launch",
            ),
        ]
        if self.overlapped is not None:
            share = (
                f"; so the hidden share, {self.hidden_fraction:.0%}, is above its ceiling "
                f"1 - launch / min(run, copy) = {self.hidden_ceiling:.0%}"
            )
            found.append(
                self._below(
                    self.overlapped,
                    self.ideal_overlapped,
                    self.ideal_overlapped_noise,
                    "overlapped",
                    "max(run, copy)",
                    share,
                    floor=0.0,  # any time below it is a hidden share above its ceiling
                )
            )
        return [b for b in found if b is not None]

    @staticmethod
    def _below(
        m: Measurement,
        ideal: float,
        noise: float,
        what: str,
        name: str,
        then: str = "",
        floor: float = NOISE_FLOOR,
    ):
        how = how_below_ideal(m, ideal, noise, floor)
        if how is None:
            return None
        beyond = how == "beyond"
        sentence = (
            f"{what} took {format_seconds(m.median)} = {m.median / ideal:.2f}x its ideal {name} "
            f"{format_seconds(ideal)}, below it {how} the noise of "
            f"{format_seconds(noise_of(m) + noise)}{then}"
        )
        if beyond:
            sentence = impossible(sentence)
        else:
            sentence += ": this run was too noisy to tell which time is off, so not a result"
        return BelowIdeal(what, sentence, beyond)

    def flags(self) -> list[str]:
        """Why some number here is not to be trusted; empty when every number is plausible."""
        found = [b.sentence for b in self.below_ideal()]
        measured = (self.link, self.run, self.copy, self.launch, self.sequential, self.overlapped)
        for m in measured:
            found += [f"{m.label}: {w}" for w in (m.warnings if m is not None else ())]
        return found

    def not_a_result(self) -> str | None:
        """The one sentence saying why this run is not a result, or None when it is one."""
        below = self.below_ideal()
        if not below:
            return None
        what = " and ".join(b.what for b in below)
        if any(b.beyond_noise for b in below):
            return (
                f"Not a result: {what} came out better than its ideal beyond the noise "
                "(see the warnings)."
            )
        return (
            f"Not a result: {what} came out below its ideal, inside noise too large to tell "
            "which time is off (see the warnings)."
        )

    @property
    def verdict(self) -> str:
        """One computed sentence: what this run shows, or why it shows nothing trustworthy."""
        refused = self.not_a_result()
        if refused:
            return refused
        if self.overlapped is None:
            c = compare(self.sequential, self.ideal_sequential)
            c = dataclasses.replace(
                c, noise=noise_of(self.sequential) + self.ideal_sequential_noise
            )
            how = (  # read 88: a partial overlap can hide inside that noise; the trace can tell
                "matches it within the noise, as forced: no overlap measurable from the times "
                f"(hidden {self.hidden_text()}){self._traced_words()}"
                if not c.measurable
                else f"is {c.ratio:.2f}x it"
            )
            if self.closest_ideal().startswith("both"):  # the time alone cannot say which
                how = (
                    f"matches it, and max(run, copy) = {format_seconds(self.ideal_overlapped)} "
                    "too, within the noise: the time cannot tell whether anything overlapped"
                )
            return (
                f"One after the other took {format_seconds(c.a)}; its ideal run + copy - "
                f"launch is {format_seconds(c.b)}: it {how}."
            )
        c = compare(self.overlapped, self.sequential)
        times = f"({format_seconds(c.a)} vs {format_seconds(c.b)})"
        if c.a_faster:
            faster = (
                f"Overlapped ran faster than one after the other {times}; hidden: "
                f"{self.hidden_text()} of the shorter part"
            )
            if self.trace_source != BOTH_TRACED:
                return f"{faster}; the worker's trace is missing, so no trace shows why."
            if self.traced_overlap == 0:
                return (
                    f"{faster}; but its traced call shows no copy during a matmul, so this run "
                    "does not show overlap as the cause."
                )
            turns = _turns(self.traced_overlap, self.worker_cores)
            return (
                f"{faster}; the traced call (one call) shows copies during matmuls for "
                f"{self.traced_overlap:.0%} of the shorter part{turns}."
            )
        if c.a_slower:
            return (
                f"Overlapped was slower than one after the other {times}; a likely cause, not "
                "tested here: the copies competed with the compute for the same cores."
            )
        return (
            f"No measurable difference between overlapped ({format_seconds(c.a)}) and one "
            f"after the other ({format_seconds(c.b)}), within the noise of "
            f"{format_seconds(c.noise)}."
        )

    def closest_ideal(self) -> str:
        """Which ideal the one-after-the-other time matches (Try it 2), computed with noise."""
        sequential = self.sequential.median
        near_sum = abs(sequential - self.ideal_sequential) <= (
            noise_of(self.sequential) + self.ideal_sequential_noise
        )
        near_max = abs(sequential - self.ideal_overlapped) <= (
            noise_of(self.sequential) + self.ideal_overlapped_noise
        )
        if near_sum and not near_max:
            return "run + copy - launch"
        if near_max and not near_sum:
            return "max(run, copy)"
        if near_sum and near_max:  # read 83: say which is wide, the ideals or the run
            apart = abs(self.ideal_sequential - self.ideal_overlapped)
            if apart <= self.ideal_sequential_noise + self.ideal_overlapped_noise:
                return "both (they are within the noise of each other)"
            return (
                "both (the ideals differ beyond their own noises, but this run's spread covers "
                "both)"
            )
        sum_off = abs(sequential / self.ideal_sequential - 1)
        max_off = abs(sequential / self.ideal_overlapped - 1)
        closer = "run + copy - launch" if sum_off <= max_off else "max(run, copy)"
        return f"neither within the noise; closer to {closer}"

    def parts_against(self, other: ComputeCopyResult) -> str:
        """This run against another at the same size and chain (the panel's), part by part, the
        one-after-the-other call included: each run's verdict reads its own parts (read 166:
        34.61 ms and 28.10 ms for that call, never read together)."""
        if (self.size, self.n_matmuls) != (other.size, other.n_matmuls):
            return "not the same experiment (size or matmuls differ), so not compared"
        return parts_between_runs(
            [
                ("run alone", self.run, other.run),
                ("copy alone", self.copy, other.copy),
                ("launch", self.launch, other.launch),
                ("one after the other", self.sequential, other.sequential),
            ],
            "both runs share one yardstick",
        )

    def which_ideal(self) -> str:
        """Try it 2, checked against this run: the sentence saying which ideal it matched."""
        refused, trace = self.not_a_result(), self._traced_half()
        times = (  # each time with the noise `closest_ideal` reads it with (read 112: printed
            # in the refused branch too, so a copy without the panel's tables can check it)
            f"One after the other took {format_seconds(self.sequential.median)} "
            f"±{format_seconds(noise_of(self.sequential))} (run + copy - launch "
            f"{format_seconds(self.ideal_sequential)} "
            f"±{format_seconds(self.ideal_sequential_noise)}, max(run, copy) "
            f"{format_seconds(self.ideal_overlapped)} "
            f"±{format_seconds(self.ideal_overlapped_noise)}"
        )
        if refused:  # read 124: said as the rule it is, not as 'cannot'
            # read 148: by how much, here, not in warnings this cell may not show
            below = "; ".join(b.sentence for b in self.below_ideal())
            refused = refused.replace(" (see the warnings).", f": {below}.")
            again = (
                "So this run's times are not read against the worked answer: a time more than "
                f"{NOISE_FLOOR:.0%} below its ideal (the overlapped one's: any amount below) is "
                "set aside here, even inside the noise (run it again)."
            )
            return f"{refused} {times}). {again}{trace}"
        matched = self.closest_ideal()
        if matched == "run + copy - launch":
            said = "as the worked answer says"
        elif matched.startswith("both (they"):
            said = "so this run cannot check the worked answer; try more matmuls or a larger size"
        elif matched.startswith("both"):
            said = "so this run cannot check the worked answer; run it again when it is quiet"
        else:
            said = "not what the worked answer says; this run's noise (see its warnings) may be why"
        return (
            f"{times}; a match differs by less than the two noises summed): it matches "
            f"{matched}, {said}.{trace}"
        )

    def _traced_words(self) -> str:
        """'; the traced call (one call) shows copies during matmuls for X% ...' or ''."""
        if self.trace_source != BOTH_TRACED:
            return ""
        return (
            f"; the traced call (one call) shows copies during matmuls for "
            f"{self.traced_overlap:.0%} of the shorter part"
        )

    def _traced_half(self) -> str:
        """The worked answer's timeline half (copies start after the last matmul), read from the
        one traced call; read 85: the times alone left it unchecked. Empty with overlap on."""
        if self.overlapped is not None:
            return ""
        if self.trace_source != BOTH_TRACED:
            return " Its timeline half cannot be checked either: the worker's trace is missing."
        share = self.traced_overlap
        gap = copies_after_matmuls_s(self.rows, self.worker_device, HOST)
        if share == 0 and gap is not None and gap >= 0:  # read 89: the order, not only no overlap
            return (
                " Its timeline half holds: in the traced call (one call) the first copy starts "
                f"{format_seconds(gap)} after the worker's last matmul ends, as the worked answer "
                "expects."
            )
        if share == 0 and gap is not None:
            return (
                " Its timeline half does not hold as the worked answer puts it: the traced call "
                "(one call) shows no copy during a matmul, but its first copy starts "
                f"{format_seconds(-gap)} before the worker's last matmul ends (between matmuls)."
            )
        if share == 0:
            return " Its timeline half cannot be checked: the traced call has no matmul or copy."
        return (
            " Its timeline half does not hold: the traced call (one call) shows copies during "
            f"matmuls for {share:.0%} of the shorter part though the order was forced, not what "
            f"the worked answer says{_turns(share, self.worker_cores)}."
        )

    def tables(self) -> list[Table]:
        def row(what, m, ideal="", ideal_s=None, floor=NOISE_FLOOR):
            ratio = f"{m.median / ideal_s:.2f}x" if ideal_s else ""
            if ideal_s and m.median < ideal_s:  # read 147: 0.95x its ideal printed bare
                ratio = f"{ratio_beside(m.median / ideal_s)}x" + (
                    " (below it: see the warning)"
                    if m.median < ideal_s * (1 - floor)
                    else f" (below it by less than the {floor:.0%} a median moves between runs: "
                    "not read as below it)"
                )
            return [
                what,
                format_seconds(m.median),
                format_seconds(m.iqr),
                len(m.times),
                ideal,
                ratio,
            ]

        rows = [
            row(f"raw TCP: {format_bytes(self.link.work)} worker -> driver", self.link),
            row(f"run: {self.matmuls} matmuls of {self.size}² on the worker", self.run),
            row(
                f"copy: {format_bytes(self.nbytes)} worker -> driver",
                self.copy,
                f"at raw TCP's rate {format_seconds(self.ideal_copy)}",
                self.ideal_copy,
            ),
            row("launch: run_and_copy on 1x1 matrices", self.launch),
            row(
                "one after the other (one function)",
                self.sequential,
                f"run + copy - launch {format_seconds(self.ideal_sequential)}",
                self.ideal_sequential,
            ),
        ]
        if self.overlapped is not None:
            rows.append(
                row(
                    "overlapped (one function)",
                    self.overlapped,
                    f"max(run, copy) {format_seconds(self.ideal_overlapped)}",
                    self.ideal_overlapped,
                    floor=0.0,  # any time below it is a hidden share above its ceiling
                )
            )
        columns = ["what", "median", "IQR", "runs", "ideal", "x ideal"]
        times = Table("Times (medians, timed in turns)", columns, rows)
        peak = f"{self.link_peak / GB:.2f} GB/s"
        share = self.copy_rate / self.link_peak
        share_noise = ratio_noise(share, self.copy, self.link)
        rates = Table(
            "Rates",
            ["what", "rate", "beside"],
            [
                [
                    "run",
                    format_rate(self.run.rate),
                    (
                        "one op thread (intra-op 1, as the package starts the worker: its design, "
                        "`processes/tf_servers.py`, not shown by a cell)"
                        if self.worker_cores is not None
                        else "a worker at an address: its threads are not known here"
                    )
                    + ": no peak is measured for it here, so this rate is not checked against one",
                ],
                [
                    "copy over gRPC",
                    f"{self.copy_rate / GB:.2f} GB/s",
                    f"{share:.0%} ± {share_noise:.0%} of raw TCP on the link ({peak}, timed in "
                    "turns)"
                    + (": too noisy to read (the band reaches 0)" if share_noise >= share else ""),
                ],
            ],
        )
        if self.overlapped is not None:
            ceiling = f"ceiling {self.hidden_ceiling:.0%} = 1 - launch / min(run, copy)"
        else:
            ceiling = "ideal 0%: order forced"
        what = "overlapped" if self.overlapped is not None else "one-after-the-other"
        overlap_rows = [["hidden (from the times)", self.hidden_text(), ceiling]]
        if self.trace_source == BOTH_TRACED:
            overlap_rows.append(
                [
                    f"traced {what} call: copies during matmuls",
                    f"{self.traced_overlap:.0%} of the shorter part",
                    "one call, worker and driver on one clock: no spread (a second call may "
                    f"differ); time in flight together, not time saved, so not bounded by the "
                    f"hidden row's ceiling{_turns(self.traced_overlap, self.worker_cores)}",
                ]
            )
        else:
            overlap_rows.append(
                [f"traced {what} call", "worker's trace missing", "the driver's side only"]
            )
        overlap = Table(
            "Overlap", ["what", "value", "note"], overlap_rows, [self.verdict], self.flags()
        )
        return [times, rates, overlap]


def _turns(share: float, cores: int | None) -> str:
    """On a worker with one usable core, what a traced share above 0 "at the same time" can
    mean (`cores`: the worker process's own; None, not known: nothing is said)."""
    if cores is None or cores >= 2 or share <= 0:
        return ""
    return (  # read 175: where the worker's cores come from, said
        f" (the worker process has {cores_phrase(cores)}, its CPU affinity capped by any CPU "
        "quota, as `d2l.usable_cores` reads them, so its "
        "matmuls and its side of the "
        f"copy are expected to have taken turns on it, {took_turns('overlapping')})"
    )


def plot_compute_copy(result: ComputeCopyResult):
    """Bars: each time beside run + copy and max(run, copy); below, one traced call's timeline."""
    figure, (bars, gantt) = plt.subplots(
        2, 1, figsize=(10, 6), gridspec_kw={"height_ratios": [1, 1.2]}
    )
    names = ["run", "copy", "launch", "one after the other"]
    parts = [result.run, result.copy, result.launch, result.sequential]
    if result.overlapped is not None:
        names.append("overlapped")
        parts.append(result.overlapped)
    bars.barh(
        names, [m.median * 1e3 for m in parts], xerr=[m.iqr * 1e3 for m in parts], color="tab:blue"
    )
    bars.axvline(
        result.ideal_sequential * 1e3,
        c="gray",
        ls="--",
        label="ideal one after the other: run + copy - launch",
    )
    bars.axvline(
        result.ideal_overlapped * 1e3,
        c="tab:green",
        ls=":",
        label="ideal overlapped: max(run, copy)",
    )
    bars.set(xlabel="time (ms), error bar = IQR")
    bars.invert_yaxis()
    bars.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    where = (
        "worker and driver, one clock"
        if result.trace_source == BOTH_TRACED
        else ("driver only: the worker's trace could not be taken")
    )
    what = "overlapped" if result.overlapped is not None else "one after the other"
    plot_timeline(result.rows, f"one traced call, {what} ({where})", ax=gantt)
    figure.tight_layout()
    return figure
