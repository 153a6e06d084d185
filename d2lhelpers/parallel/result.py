"""What a measured run of any scheme reports: its time beside one device's, and its verdict.

Each scheme's run (`replica_runs`, `tensor_parallel_runs`, `pipeline_runs`) returns a
`ParallelResult`: the scheme's time and throughput beside the same model on one device, the
speedup reachable here, the largest difference from the one-device output, and a verdict computed
from the times and their noise (a speedup above the reachable beyond the noise is flagged).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from d2lhelpers.core.cache import machine_busy
from d2lhelpers.core.progress import Progress, Steps
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import cores_phrase, enough_digits, format_seconds, usable_cores
from d2lhelpers.core.verdicts import (
    UNTESTED,
    Spread,
    agree_within_noise,
    compare,
    faster_or_slower,
    how_below_ideal,
    model_test,
    noise_of,
    noise_text,
    noisy_run,
    numbered,
    with_noise,
)
from d2lhelpers.parallel.model import MATCH_TOLERANCE
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.timing.interleaved import ROUNDS, measure_in_turns

# What the reachable speedup assumes (read 82: 'reachable here' read as this busy machine's)
REACHABLE_IS = "a model: hand-overs free, no other program on the usable cores"
# the ± is the band of the time comparison with one device, on the speedup: it says which side of
# 1x the run is, and is not the band the reachable is read against (that one: the times')
SPEEDUP_COLUMN = "speedup vs one device (± its band against 1x)"


def communication_note(kind: str) -> str:
    """What handing a tensor from one device to another really is on these devices (say it once)."""
    if kind == "logical CPU":  # read 182: the hand-over's bytes expected, not TF's design
        return (
            "Communication here is a memory hand-over inside one process: logical CPU devices "
            "share the host's memory, so no bytes cross a link, and a hand-over is expected to "
            "copy few or none (not measured here; notebook 02 times one against a real copy and "
            "bounds the bytes it moves). Between real GPUs the same step "
            "is a copy over NVLink or PCIe, and it costs time per byte (expected, not measured "
            "here)."
        )
    if kind == "virtual GPU":
        return (
            "Communication here is a copy inside one GPU's memory: virtual GPUs share one chip, "
            "so no bytes cross NVLink or PCIe, and they also share its compute."
        )
    return (
        "Communication here is a real copy between GPUs over the link that joins them (NVLink "
        "or PCIe: `nvidia-smi topo -m` says which)."
    )


# What each run did against the reachable, in words (read 91: 'noisy' quoted, never printed;
# read 174: not quoted as a label, as no table prints these words)
WORDS_SHOWN = {
    "missed": "was missed",
    "held": "held",
    "noisy": "was not tested (too noisy)",
    "untestable": "was not tested (its band is too wide)",
}


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class ParallelResult(Reported):
    """One measured run of a scheme on `devices`, beside the same work on `devices[0]` alone."""

    scheme: str
    devices: list[str]
    kind: str
    samples: int  # rows (requests) that one run processes
    measurement: Measurement  # the scheme on all its devices
    reference: Measurement  # the same model and batch on one device
    ideal_speedup: float  # what the split would reach if hand-overs and sharing cost nothing
    max_error: float  # largest |scheme output - one-device output|
    cores: int = dataclasses.field(default_factory=usable_cores)  # this process's, at run time

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    @property
    def time(self) -> float:
        return self.measurement.median

    @property
    def reference_time(self) -> float:
        return self.reference.median

    @property
    def throughput(self) -> float:
        """Samples per second on all the devices together."""
        return self.samples / self.time

    @property
    def reference_throughput(self) -> float:
        return self.samples / self.reference_time

    @property
    def speedup(self) -> float:
        return self.reference_time / self.time

    @property
    def speedup_noise(self) -> float:
        """How far the speedup could move if measured again: both times' noises over this run's
        time, the band `compare` reads the two times with, so that the speedup's band holds 1
        exactly when the verdict says no measurable difference."""
        return (noise_of(self.measurement) + noise_of(self.reference)) / self.time

    def speedup_text(self) -> str:
        """'1.33x ± 0.33' with as many decimals (2 to 4) as it takes for the printed band to
        sit on the side of 1 the verdict read (read 113: 1.33 - 0.33 = 1.00 beside 'faster')."""
        s, b = self.speedup, self.speedup_noise
        c = compare(self.measurement, self.reference)

        def reads(d: int) -> bool:
            low, high = round(round(s, d) - round(b, d), d), round(round(s, d) + round(b, d), d)
            return (low > 1) if c.a_faster else (high < 1) if c.a_slower else (low <= 1 <= high)

        d = enough_digits(reads, 2, 3, past=4)
        return f"{s:.{d}f}x ± {b:.{d}f}"

    def against_rerun(self, other: ParallelResult) -> str:
        """This run's speedup against another run of the same experiment (same scheme, devices,
        rows and work), within both bands: when they miss each other, something changed between
        the runs that neither run's own noise holds."""
        if not self.comparable(other):
            return f"{self.label} and {other.label}: not the same experiment, so not compared"
        a, b = self.speedup, other.speedup
        words = (self.reachable_word, other.reachable_word)
        if not self.both_results(other):  # read 77: a flagged run, 'missed'
            # read 175: nor compared with the other run (as a bubble that is not one is not)
            a, b = (
                f"{x:.2f}x" + (f" ({w})" if "not a result" in w else "")
                for x, w in zip((a, b), words, strict=True)
            )
            return (
                f"{self.label}: {a} in one run, {b} in the other: a speedup that is not a "
                "result is not compared"
            )
        band = self.speedup_noise + other.speedup_noise
        said = f"{self.label}: {a:.2f}x in one run, {b:.2f}x in the other (band ±{band:.2f})"
        if abs(a - b) <= band:
            said += ": they agree within their noise"
            if words[0] != words[1]:  # read 73: "agree" beside two words
                shown = [WORDS_SHOWN[w] for w in words]
                said += (
                    f", though the reachable model {shown[0]} in one and {shown[1]} in the other: "
                )
                untested = [w for w in words if w in UNTESTED]
                if untested:  # read 75: one band, not two sides
                    # an untested run's time is inside the model's band (`model_test`); a run
                    # that missed is outside it (read 105: 'missed' beside 'too noisy')
                    said += (
                        f"the untested run does not read the model, as {UNTESTED[untested[0]]} "
                        "(its time is inside the model's band"
                        + (")" if "missed" in words else " as well)")
                    )
                else:
                    said += (
                        "each sits on its side of that model's band, within the noise of the "
                        "other run"
                    )
            return said
        return (
            said + ": they differ beyond it, so something changed between the runs that neither "
            "run's noise holds (a hypothesis, not measured: the machine's load, another program, "
            "the experiment's own threads); each verdict reads its own run"
        )

    def comparable(self, other: ParallelResult) -> bool:
        """Whether `other` ran the same experiment: scheme, devices, rows and work."""
        mine = (self.scheme, self.devices, self.samples, self.measurement.work)
        return mine == (other.scheme, other.devices, other.samples, other.measurement.work)

    def both_results(self, other: ParallelResult) -> bool:
        """Whether neither run's speedup is set aside as 'not a result' (`reachable_word`)."""
        return not any("not a result" in r.reachable_word for r in (self, other))

    def one_device_against(self, *others: ParallelResult) -> str:
        """This run's one-device time against other runs', of the same rows and work (each
        scheme's cell times its own), every pair read: when two differ beyond both noises, the
        one-device time moved between the cells, and each speedup holds against its own cell's
        time only (read 85: three speedups ranked, two yardsticks compared)."""
        runs = [self, *others]
        if any((r.samples, r.reference.work) != (self.samples, self.reference.work) for r in runs):
            names = " and ".join(r.label for r in runs)
            return f"{names}: not the same one-device work, so not compared"
        # read 180: the pipeline's one device runs its stack of layers, not the MLP (the same
        # FLOPs, as the check above requires): said where the schemes are mixed
        mixed = len({r.scheme for r in runs}) > 1
        said = "one device: " + ", ".join(
            f"{with_noise(r.reference)} beside {r.scheme}"
            + (
                " (its stack of layers, the same FLOPs)"
                if mixed and r.scheme == "pipeline parallel"
                else ""
            )
            for r in runs
        )
        pairs = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1 :]]
        apart = [(a, b) for a, b in pairs if compare(a.reference, b.reference).measurable]
        if not apart:
            shared = (
                "both speedups share one yardstick"
                if len(runs) == 2
                else f"the {len(runs)} speedups share one yardstick"
            )
            return f"{said}: " + agree_within_noise("they", [r.reference for r in runs], shared)
        a, b = apart[0]
        ratio = compare(a.reference, b.reference).ratio
        which = "" if len(runs) == 2 else f"{a.scheme} / {b.scheme}: "
        return (
            said + f" ({which}{ratio:.2f}x): they differ beyond both noises, so the one-device "
            "time moved between the cells (the machine's speed or load changed: a hypothesis, not "
            "measured); each speedup holds against its own cell's one-device time, and the "
            "speedups are not compared digit by digit"
        )

    @property
    def core_limited(self) -> bool:
        """Logical CPU devices on fewer cores: at most `cores` of them compute at once."""
        return self.kind == "logical CPU" and self.n_devices > self.cores

    @property
    def reachable_is(self) -> str:
        """What the reachable speedup is: a model (a pipeline's names its bubble: read 156)."""
        return REACHABLE_IS

    @property
    def reachable_speedup(self) -> float:
        """The ideal for this split, capped by the cores that can compute at once."""
        return min(self.ideal_speedup, self.cores) if self.core_limited else self.ideal_speedup

    @property
    def matches(self) -> bool:
        return self.max_error <= MATCH_TOLERANCE

    @property
    def above_reachable(self) -> str | None:
        """None, or `how_below_ideal`'s "inside" or "beyond": how the time sits below the
        reachable speedup's time (above the reachable speedup), within or beyond the noise."""
        reachable = self.reachable_speedup
        ideal_time = self.reference_time / reachable
        return how_below_ideal(self.measurement, ideal_time, noise_of(self.reference) / reachable)

    @property
    def beats_reachable(self) -> bool:
        return self.above_reachable == "beyond"

    @property
    def label(self) -> str:
        plural = "s" if self.n_devices > 1 else ""
        return f"{self.scheme} on {self.n_devices} {self.kind} device{plural}"

    @property
    def trusted(self) -> bool:
        return not (self.beats_reachable or not self.matches)

    @property
    def verdict(self) -> str:
        """One computed sentence: faster, slower or no measurable difference; the reachable."""
        if not self.trusted:
            return f"{self.label}: flagged, not a result (see the warning)"
        if self.above_reachable:  # inside the noise: not impossible, but not a speedup either
            return f"{self.label}: {self.above_reachable_words}"
        outcome = faster_or_slower(self.measurement, self.reference, self.label, "one device")
        said = f"{outcome}; reachable here: {self.reachable_speedup:.2f}x ({self.reachable_is})"
        if self.speedup > self.reachable_speedup:  # above it by less than the floor
            at_it = f" (the {self.speedup:.2f}x measured sits at it, within the noise"
            if self.reachable_test == "held":
                return (
                    said + at_it + ": the model held, and the part above it is noise, not a result)"
                )
            # read 86: a noisy run 'sat at' the reachable, which every notebook calls unchecked
            return said + at_it + f", but not tested: {self._untested_why()})"
        return f"{said} ({self.reachable_reading})"

    @property
    def reachable_model(self) -> Spread:
        """The reachable speedup's time (one device's over it), with one device's noise scaled."""
        reachable = self.reachable_speedup
        return Spread(self.reference_time / reachable, noise_of(self.reference) / reachable)

    @property
    def reachable_test(self) -> str:
        """`model_test`'s word for this time against the reachable's, the rule every notebook
        reads a model by; the outcome without the model is one device's time (no gain)."""
        word = model_test(self.measurement, self.reachable_model, self.reference_time)
        # the reachable is one device's time scaled (read 66: 'held' on a ±37% reference);
        # `_untested_why` names whose runs were noisy
        return "noisy" if word == "noisy yardstick" else word

    @property
    def reachable_word(self) -> str:
        """`reachable_test`'s word, or why the run is not read against the reachable at all:
        above it (faster than the model allows), beyond the noise or within it."""
        if not self.trusted:
            return "flagged, not a result"
        if self.above_reachable:
            return "above it within the noise, not a result"
        return self.reachable_test

    @property
    def reachable_reading(self) -> str:
        """The time against the reachable's, with the band the test used, in a few words."""
        model, word = self.reachable_model, self.reachable_test
        band = noise_of(self.measurement) + noise_of(model)
        where = (
            f"its time, {format_seconds(self.time)}, against the reachable's "
            f"{format_seconds(model.median)}, with both noises {format_seconds(band)}"
        )
        if word == "missed":
            busy = machine_busy(self.cores)  # read 82: two spinning programs went unnamed
            return (
                f"{where}: slower beyond the noise, so the model missed (it leaves out the "
                "hand-overs and all the devices share; what the split lost is not measured here"
                + (f"; {busy}: another program on the cores is a candidate too" if busy else "")
                + ")"
            )
        if word == "held":
            return f"{where}: within the noise, so the model held"
        return f"{where}: within the noise, but not tested ({self._untested_why()})"

    def _untested_why(self) -> str:
        """Why `reachable_test` did not call the model held, in a few words."""
        why = UNTESTED[self.reachable_test]
        if self.reachable_test == "noisy" and not noisy_run(self.measurement):  # read 81
            why = f"one device's {why.removeprefix('its ')}, and the reachable is scaled from it"
        return why

    @property
    def above_reachable_words(self) -> str:
        return (
            f"{self.speedup:.2f}x one device, above the {self.reachable_speedup:.2f}x reachable "
            f"here within its noise (±{self.speedup_noise:.2f}): not a result"
        )

    def flags(self) -> list[str]:
        found = []
        if self.beats_reachable:
            found.append(self._above_reachable_flag())
        if not self.matches:
            found.append(
                f"{self.label} differs from the one-device output by up to {self.max_error:.1e}: "
                "the split computed something else"
            )
        for m in (self.measurement, self.reference):
            found += [f"{m.label}: {w}" for w in m.warnings]
        return found

    def _above_reachable_flag(self) -> str:
        """A speedup above the reachable beyond the noise: not read as a result. The reachable
        is a model, not a law (smaller matmuls can run faster per FLOP), so the causes are listed
        in order, the ones this run's numbers speak against last, with why."""
        noisy = noisy_run(self.measurement) or noisy_run(self.reference)
        causes = [
            (
                "the runs were too noisy "
                + ("(these runs were noisy)" if noisy else "(unlikely: these runs were not noisy)"),
                not noisy,
            ),
            ("the one-device time was measured slow (the machine was busier during it)", False),
            (
                "the split's smaller matmuls ran faster per FLOP than one device's (the model "
                "assumes the same rate: a cache effect would break it; a hypothesis, not measured)",
                False,
            ),
            (
                "work was skipped, or the clock stopped before the devices finished (unlikely "
                "for the values: the outputs match one device's)"
                if self.matches
                else "work was skipped, or the clock stopped before the devices finished",
                self.matches,
            ),
        ]
        ordered = [c for c, last in causes if not last] + [c for c, last in causes if last]
        listed = numbered(ordered)
        return (
            f"{self.label} at {self.speedup:.2f}x one device is above the "
            f"{self.reachable_speedup:.2f}x reachable here beyond the noise (±"
            f"{self.speedup_noise:.2f}): not read as a result. The reachable is a model (each "
            "device computes its share at one device's rate, as many at once as can compute "
            f"here). Possible causes, in order: {listed}"
        )

    def details(self) -> list[str]:
        """Facts of this run beyond the times (what was split, what was counted)."""
        lines = [
            f"largest difference from the one-device output: {self.max_error:.1e} (a split "
            f"that differs by more than {MATCH_TOLERANCE:.0e} computed something else)"
        ]
        if self.core_limited:
            lines.append(
                f"{self.n_devices} logical devices on {cores_phrase(self.cores)}: at most "
                f"{self.cores} compute at once, so {self.cores}x is the most reachable here "
                "(the model's cap; a split can still beat it, e.g. by cache effects, a "
                "hypothesis not measured here: beyond the noise it is flagged, within it not a "
                "result)"
            )
        if self.kind == "virtual GPU" and self.n_devices > 1:
            lines.append(
                f"{self.n_devices} virtual GPUs share one chip's compute: the reachable speedup "
                "assumes separate chips, so it is an upper bound here"
            )
        return lines

    def rows(self) -> list[tuple]:
        """(name, time, samples/s, speedup, the time's measurement or None for a model)."""
        reachable_time = self.reference_time / self.reachable_speedup
        return [
            ("one device", self.reference_time, self.reference_throughput, 1.0, self.reference),
            (self.label, self.time, self.throughput, self.speedup, self.measurement),
            (
                f"reachable here ({self.reachable_is})",
                reachable_time,
                self.samples / reachable_time,
                self.reachable_speedup,
                None,
            ),
        ]

    def tables(self) -> list[Table]:
        # read 76: a flagged run's speedup printed bare in its row read as a result
        aside = "" if self.trusted else " (flagged, not a result)"
        rows = [
            (
                name,
                format_seconds(t),
                noise_text(m) if m else "(model)",
                f"{rate:,.0f}",
                f"{self.speedup_text()}{aside}" if m is self.measurement else
                f"{speedup:.2f}x",
            )
            for name, t, rate, speedup, m in self.rows()
        ]  # fmt: skip
        return [
            Table(
                f"{self.scheme}: a batch of {self.samples} rows",
                # read 160: '1.57x ± 0.39' read against the reachable 2.00x below it: the band
                # is the one-device comparison's, as the header says
                ("run", "time per batch", "noise", "samples/s", SPEEDUP_COLUMN),
                rows,
                [self.verdict, *self.details()],
                self.flags(),
            )
        ]


def measure_calls(
    calls: Sequence[tuple[str, Callable, int]],
    flops: float,
    device_peak: float | None,
    progress: Progress | None,
    rounds: int = ROUNDS,
    **measure_options,
) -> list[Measurement]:
    """Each (label, call, devices) measured in turns, `rounds` times (`measure_in_turns`), its
    peak `devices` x `device_peak`: a load that changes meanwhile slows them alike, so their
    ratios hold, and each run's times pool its rounds, so its IQR holds the drift between them.

    `progress(done, total, status)` follows the rounds, repeat by repeat.
    """
    steps = Steps(progress, rounds)
    runs = [
        (call, label, {"flops": flops, "peak": k * device_peak if device_peak else None})
        for label, call, k in calls
    ]
    return measure_in_turns(runs, steps, rounds, **measure_options)
