"""Notebook 07: a pipeline's throughput against the number of sequences in flight.

With m microbatches on n stages, a step takes (m + n - 1) stage times where one device would take
m n: the pipeline's speedup over one device with the same sequences is m n / (m + n - 1) (GPipe),
at most the devices that can compute at once. One microbatch gives no speedup; many approach n.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from d2lhelpers.core import checks
from d2lhelpers.core.concurrency import at_once_here
from d2lhelpers.core.progress import Steps
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import format_rate, format_seconds
from d2lhelpers.core.verdicts import (
    NOISE_FLOOR,
    UNTESTED,
    Spread,
    compare,
    faster_or_slower,
    how_below_ideal,
    impossible,
    model_test,
    noise_of,
    parts_between_runs,
    with_noise,
)
from d2lhelpers.devices import select_devices
from d2lhelpers.lessons.l07_serving.points import ready_engines
from d2lhelpers.serving.config import decoder_config
from d2lhelpers.serving.engines import Engine, ServingCode
from d2lhelpers.timing.benchmark import Measurement, measure

MICROBATCHES = (1, 2, 4, 8)


def speedup_text(one: Measurement, pipe: Measurement) -> str:
    """one / pipe, with the range it could take with each time anywhere in its noise: the same
    band the time comparison beside it uses, so the two cannot disagree."""
    low = (one.median - noise_of(one)) / (pipe.median + noise_of(pipe))
    top = pipe.median - noise_of(pipe)
    high = f"{(one.median + noise_of(one)) / top:.2f}" if top > 0 else "no bound"
    return f"{one.median / pipe.median:.2f} ({max(low, 0.0):.2f} to {high})"


READING = {
    "held": "held",
    "missed": "missed",
    "noisy": "too noisy to test",
    "noisy yardstick": "too noisy to test",
    "untestable": "too noisy to test",
}


ROUNDS = 2  # each engine timed in rounds, alternating: the spread then includes the drift


def decode_time(engine: Engine, budget_s: float = 0.3) -> Measurement:
    """One decoding step with every slot busy."""
    tokens = np.ones(engine.slots, np.int32)
    positions = np.full(engine.slots, engine.config.max_len - 1, np.int32)
    return measure(lambda: engine.decode(tokens, positions), engine.name, budget_s=budget_s)


def alternating(engines: list[Engine], rounds: int = ROUNDS) -> list[Measurement]:
    """Each engine's decoding step, timed in `rounds` turns that alternate between them (a, b,
    a, b): a machine that speeds up or slows down between turns widens both spreads, so a
    comparison of the two reads that drift as noise instead of as a difference."""
    turns = [[decode_time(e, 0.3 / rounds) for e in engines] for _ in range(rounds)]
    return [
        Measurement(e.name, [t for turn in turns for t in turn[i].times])
        for i, e in enumerate(engines)
    ]


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class PipelineInFlightResult(Reported):
    """Pipeline and one device, decoding the same number of sequences, per microbatch count."""

    n_devices: int
    at_once: int
    per_microbatch: int
    microbatches: list[int]
    one: list[Measurement]
    pipeline: list[Measurement]

    def model(self, m: int) -> float:
        n = self.n_devices
        return min(self.at_once, m * n / (m + n - 1))

    def no_gain(self, m: int) -> bool:
        """The model predicts one device's time (within the noise floor): agreeing with it
        says only that nothing was gained; a miss is what would test it."""
        return abs(self.model(m) - 1) <= NOISE_FLOOR

    @property
    def pays_off_at(self) -> int | None:
        """The fewest sequences in flight at which the pipeline beat one device beyond noise."""
        for m, one, pipe in zip(self.microbatches, self.one, self.pipeline, strict=True):
            c = compare(pipe, one)
            if c.a_faster:
                return m * self.per_microbatch
        return None

    def model_tests(self) -> dict[int, str]:
        """Per microbatch count: 'missed' (slower or faster than the model beyond the noise),
        'held', or 'untestable' (the band covers one device's time too: no gain would have
        passed as well)."""
        return {
            m: model_test(pipe, self.model_time(m, one), one.median)
            for m, one, pipe in zip(self.microbatches, self.one, self.pipeline, strict=True)
        }

    def model_time(self, m: int, one: Measurement) -> Spread:
        """The pipeline's time at `m` in the model: one device's, with its noise, over the
        model's speedup (one home for the model tests, the ideal and the 'below' reading)."""
        return Spread(one.median / self.model(m), noise_of(one) / self.model(m))

    def above_ideal(self, m: int, one: Measurement, pipe: Measurement) -> str | None:
        """Whether the pipeline beat its model at `m`, which is its ideal (no communication,
        the devices at once): None, or `how_below_ideal`'s "inside" or "beyond" the noise."""
        ideal = self.model_time(m, one)
        return how_below_ideal(pipe, ideal.median, ideal.iqr)

    def steps_against(self, sweep) -> str:
        """One device's step here against the load sweep's for as many sequences (the yardstick
        the sweep, lock step and failure cells read against; read 92: 1.59 ms here beside the
        sweep's 989.4 µs ±5%, unsaid), and the pipeline's against the sweep's pipeline where a
        row runs its microbatches (read 132: 1.58 ms in the sweep, 2.90 ms here, unsaid)."""
        per = sweep.one_device.slots[0]
        parts, missing = [], []
        rows = [i for i, m in enumerate(self.microbatches) if m * self.per_microbatch == per]
        if rows:
            here, there = self.one[rows[0]], sweep.one_device.decode[0]
            parts.append((f"one device's step of {per} sequences", here, there))
        else:
            missing.append(f"no row here decodes the sweep's {per} sequences on one device")
        found = next((s for s in getattr(sweep, "sweeps", []) if s.layout == "pipeline"), None)
        if found is not None:
            slots = found.capacity.slots[0]  # its microbatches of the sweep's slots per device
            m = slots // per
            rows = [
                i for i, k in enumerate(self.microbatches) if k == m and self.per_microbatch == per
            ]
            if rows:
                name = f"the pipeline's step of {slots} sequences ({m} microbatches)"
                parts.append((name, self.pipeline[rows[0]], found.capacity.decode[0]))
            else:
                missing.append(f"no row here runs the sweep's pipeline ({m} microbatches of {per})")
        said = [f"{line}: not compared" for line in missing]
        if parts:
            said.append(
                parts_between_runs(
                    parts, "the sweep's yardsticks hold for this cell too", other="the load sweep"
                )
            )
        return "; ".join(said)

    def drift(self) -> list[str]:
        """One device's step measured faster for more sequences than for fewer, beyond both
        noises: the machine's speed changed between rows (each row's two times were measured
        in alternating turns, so a row's comparison reads the drift as noise; rows do not)."""
        found = []
        pairs = list(zip(self.microbatches, self.one, strict=True))
        for (m, a), (k, b) in zip(pairs, pairs[1:], strict=False):
            c = compare(b, a)
            if c.a_faster:
                found.append(
                    f"one device's step took {format_seconds(a.median)} for "
                    f"{m * self.per_microbatch} sequences but {format_seconds(b.median)} for "
                    f"{k * self.per_microbatch}: less time for more work, beyond both noises, so "
                    "something besides the work changed between these rows (the machine's speed: "
                    "a hypothesis); compare within a row only"
                )
        return found

    def flags(self) -> list[str]:
        return [
            impossible(f"the pipeline at m = {m} is faster than its model (its ideal)")
            for m, one, pipe in zip(self.microbatches, self.one, self.pipeline, strict=True)
            if self.above_ideal(m, one, pipe) == "beyond"
        ]

    def below_model(self) -> list[int]:
        """Microbatch counts at which the pipeline was slower than its model, beyond the noise."""
        return [
            m
            for m, one, pipe in zip(self.microbatches, self.one, self.pipeline, strict=True)
            if compare(pipe, self.model_time(m, one)).a_slower
        ]

    @property
    def verdict(self) -> str:
        at = self.pays_off_at
        said = (
            "the pipeline beat one device at none of these sequence counts"
            if at is None
            else f"the pipeline beat one device from {at} sequences in flight on"
        )
        below = self.below_model()
        if not below:
            tests = self.model_tests()
            held = [m for m, t in tests.items() if t == "held"]
            same = [m for m in held if self.no_gain(m)]
            note = (
                f" (at m = {same} it predicts no gain: only a miss would have tested it)"
                if same
                else ""
            )
            if len(held) == len(tests):
                return said + "; the model held within the noise at every m" + note
            if held:
                said += f"; the model held within the noise at m = {held}" + note
            faster = [m for m, t in tests.items() if t == "missed"]  # not below: above it
            if faster:
                said += "; " + impossible(f"at m = {faster} faster than its model beyond the noise")
            for word, why in UNTESTED.items():
                at = [m for m, t in tests.items() if t == word]
                if at:
                    said += f"; at m = {at} too noisy to test: {why}"
            return said
        if len(below) == len(self.microbatches):
            return said + "; it was slower than its model at every m: here the model did not hold"
        return said + f"; it was slower than its model at m = {below}"

    def tables(self) -> list[Table]:
        rows = []
        tests = self.model_tests()
        for m, one, pipe in zip(self.microbatches, self.one, self.pipeline, strict=True):
            seqs = m * self.per_microbatch
            reading = READING[tests[m]] + (" (no gain predicted)" if self.no_gain(m) else "")
            measured = faster_or_slower(pipe, one, "pipeline", "one device")
            above = self.above_ideal(m, one, pipe)
            if above:  # faster than the model, which is this m's ideal: not a result
                reading = measured = f"faster than its ideal {self.model(m):.2f}x, " + (
                    "beyond the noise: impossible, so not a result (see the flags)"
                    if above == "beyond"
                    else "within the noise: not a result"
                )
            rows.append(
                [
                    seqs,
                    m,
                    format_rate(seqs / one.median, "tok/s"),
                    format_rate(seqs / pipe.median, "tok/s"),
                    speedup_text(one, pipe),
                    f"{self.model(m):.2f}",
                    reading,
                    measured,
                ]
            )
        columns = [
            "in flight",
            "microbatches",
            "one device",
            "pipeline",
            "speedup",
            "model",
            "model test",
            "measured",
        ]

        def steps(ms):
            return ", ".join(with_noise(x) for x in ms)

        note = (
            f"model: min({self.at_once} devices at once, m n / (m + n - 1)) for m microbatches "
            f"on n = {self.n_devices} stages (GPipe's bubble): the speedup it predicts with "
            "nothing else costing time, so also the most each m allows ('missed' is a speedup "
            "below it beyond the noise: the prediction missed, the ceiling held; one above it is "
            "flagged, not read); pipeline "
            f"steps: {steps(self.pipeline)}; one device's steps: {steps(self.one)} (each row's "
            f"two engines timed in {ROUNDS} alternating turns; the speedup's range is where it "
            "could be with both times anywhere in their noise)"
        )
        title = "decoding throughput against sequences in flight"
        return [Table(title, columns, rows, [note, *self.drift()], self.flags())]


def run_pipeline_in_flight(
    n_devices: int = 2,
    microbatches=MICROBATCHES,
    *,
    per_microbatch: int = 4,
    prompt_len: int = 8,
    n_out: int = 16,
    width: int = 64,
    layers: int = 2,
    code: ServingCode | None = None,
    progress: Callable | None = None,
) -> PipelineInFlightResult:
    """The pipeline's and one device's decoding step for m x `per_microbatch` sequences."""
    config = decoder_config(width, layers, prompt_len, n_out)
    devices = select_devices(checks.require_count("devices", n_devices, 2))
    counts = checks.require_sweep("microbatches", microbatches, 1, 64)
    code = code or ServingCode()
    steps = Steps(progress, len(counts))
    one, pipe = [], []
    for m in counts:
        slots = m * per_microbatch
        [single] = ready_engines("one device", config, devices, slots, code, prompt_len)
        [group] = ready_engines(
            "pipeline", config, devices, per_microbatch, code, prompt_len, microbatches=m
        )
        a, b = alternating([single, group])
        one.append(a)
        pipe.append(b)
        steps.finish(f"{m} microbatches")
    at_once = at_once_here(n_devices, devices[0].kind)
    return PipelineInFlightResult(n_devices, at_once, per_microbatch, counts, one, pipe)
