"""Notebook 05: what TensorFlow's all-reduce timed per message size says about the alpha-beta
model, from that run's numbers and their noise.

A fit of t(S) = alpha + S / beta gives:
- alpha: the fixed cost of one call: launching one function piece per device, the ranks
  finding each other, the first chunk. NCCL on NVLink needs a few µs per step (NCCL's own
  figures, not measured here); on logical CPUs the whole call's start-up is about a
  millisecond, and grows with the number of devices.
- beta: S / t, the rate at which the ring gets S bytes per device reduced (NCCL-tests' "algbw").
  Its bus bandwidth B = beta * 2(n-1)/n is the rate each rank's "link" carried: on logical CPUs
  the rate at which shared cores copy and add in RAM, set beside one device's own copy and add.

The model must predict, not only fit: alpha comes from a tiny message alone, beta from the
largest size alone, and every other size is predicted, inside the noise of its own measurement
and of the two that alpha and beta come from; separately, a least-squares fit on every other
size predicts the sizes it did not see. It holds while the "link" keeps one speed: above 32 MiB
every new tensor costs page faults (`FRESH_PAGES_BYTES`), and a beta taken there is 2-3x too
slow for the sizes below.
"""

from __future__ import annotations

import dataclasses
import math

from d2lhelpers.collectives.costs import (
    FIT_METHOD,
    AlphaBeta,
    Residual,
    bus_bandwidth_bound_s,
    fit_prediction_noise_s,
)
from d2lhelpers.collectives.tf_allreduce import FRESH_PAGES_BYTES, TINY_BYTES
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import format_bytes, format_rate, format_seconds
from d2lhelpers.core.verdicts import (
    LIKELY_CAUSES,
    NOISE_FLOOR,
    beats_ideal,
    how_below_ideal,
    impossible,
    noise_of,
    noise_text,
    noisy_run,
    relative_noise,
    with_noise,
)
from d2lhelpers.lessons.l05_collectives.plots import plot_allreduce_sweep
from d2lhelpers.timing.benchmark import Measurement

BOUND_CAUSES = (
    "β was measured low: the largest size's run was slow (noise, or fresh pages for a large "
    "tensor), so B and its bound are too low",
    *LIKELY_CAUSES,
)
ALPHA_CAUSES = (
    "α was measured high: the 4-byte run was slow (a hypothesis: the machine was busier then), "
    "so every prediction starts too high",
    *LIKELY_CAUSES,
)
# Why a size is not read (`unread`): the verdict's and both tables' one list of reasons
FLAGGED, BELOW_ALPHA, BELOW_BOUND = "flagged", "below α", "below the bandwidth bound"
NOT_READ = "inside the noise: not read"


def _one_sided(read: list) -> str:
    """Read 165: every residual read on one side of the model (3 or more): what a shared
    error would give, since every prediction shares α and β (a hypothesis)."""
    if len(read) < 3 or not (
        all(r.relative < 0 for r in read) or all(r.relative > 0 for r in read)
    ):
        return ""
    below = read[0].relative < 0
    return (
        f"; all {len(read)} {'below' if below else 'above'} the model: one-sided, as "
        + (
            "an α measured high or a β measured low"
            if below
            else "an α measured low or a β measured high"
        )
        + " would make them, since every prediction shares both (a hypothesis, not measured)"
    )


@dataclasses.dataclass(repr=False)  # shown by its tables (`Reported`)
class AllreduceSweepResult(Reported):
    """TF's all-reduce on `n_devices` timed per message size, beside the alpha-beta predictions.

    `model`: alpha from the tiny message alone, beta from the largest size alone; it predicts
    every other size (`residuals`). `fitted`: least squares on every other size (`fit_sizes`),
    predicting the rest (`held_out_residuals`); None with fewer than 3 sizes. `copy`, `add`: one
    device copying, and adding, a tensor of the largest size (the RAM the link really is).
    """

    n_devices: int
    kind: str
    sizes: list[int]  # bytes per device, ascending
    measurements: list[Measurement]
    tiny: Measurement
    copy: Measurement
    add: Measurement
    model: AlphaBeta
    fitted: AlphaBeta | None
    fit_sizes: list[int]

    def plot(self, ax=None):
        """Times, the alpha-beta prediction and the bound (`plots.plot_allreduce_sweep`)."""
        return plot_allreduce_sweep(self, ax)

    @property
    def times(self) -> list[float]:
        return [m.median for m in self.measurements]

    @property
    def predicted(self) -> list[float]:
        """The two-point model's time for every size (the largest is exact by construction)."""
        return [self.model.predict(s) for s in self.sizes]

    @property
    def residuals(self) -> list[Residual]:
        """Sizes the two-point model did not see (all but the largest): measured vs predicted."""
        return self.model.residuals(self.sizes[:-1], self.times[:-1])

    def prediction_noise(self, nbytes: float) -> float:
        """How far the two-point prediction for `nbytes` could move with the noise of the two
        runs it comes from: alpha + S/beta = t_tiny (1 - S/S_max) + t_max S/S_max."""
        share = nbytes / self.sizes[-1]
        return (1 - share) * noise_of(self.tiny) + share * noise_of(self.measurements[-1])

    def within_noise(self) -> list[bool]:
        """Per predicted size: whether |measured - predicted| is inside the noise of that size's
        run and of the prediction (`prediction_noise`)."""
        return [
            abs(r.measured_s - r.predicted_s) <= noise_of(m) + self.prediction_noise(r.nbytes)
            for r, m in zip(self.residuals, self.measurements, strict=False)
        ]

    @property
    def held_out_sizes(self) -> list[int]:
        return [s for s in self.sizes if s not in self.fit_sizes]

    @property
    def held_out_residuals(self) -> list[Residual]:
        if self.fitted is None:
            return []
        held = self.held_out_sizes
        times = [t for s, t in zip(self.sizes, self.times, strict=True) if s in held]
        return self.fitted.residuals(held, times)

    @property
    def bus_bandwidth(self) -> float | None:
        """B = beta * 2(n-1)/n, bytes/s through each rank's link; None when nothing moves."""
        if self.n_devices < 2 or math.isinf(self.model.beta_bytes_per_s):
            return None
        return self.model.beta_bytes_per_s * 2 * (self.n_devices - 1) / self.n_devices

    def bound_s(self, nbytes: float) -> float | None:
        """Bus-bandwidth lower bound 2(n-1)/n * S / B with B = `bus_bandwidth`."""
        bandwidth = self.bus_bandwidth
        return bus_bandwidth_bound_s(self.n_devices, nbytes, bandwidth) if bandwidth else None

    def bound_noise(self, nbytes: float) -> float:
        """How far `bound_s(nbytes)` = S (t_max - t_tiny) / S_max could move with the noise of
        the two runs B comes from."""
        share = nbytes / self.sizes[-1]
        return share * (noise_of(self.measurements[-1]) + noise_of(self.tiny))

    @property
    def alpha_beta_noises(self) -> tuple[float, float]:
        """How far alpha and beta could move, as shares of each, with the noise of the two runs
        they come from (alpha = t_tiny, beta = S_max / (t_max - t_tiny); a link's are the same
        shares): read 168, a crossover 0.8 alpha beta printed as a point value."""
        tiny, top = self.tiny, self.measurements[-1]
        span = top.median - tiny.median
        beta = (noise_of(top) + noise_of(tiny)) / span if span > 0 else math.inf
        return noise_of(tiny) / tiny.median, beta

    @property
    def link(self) -> AlphaBeta | None:
        """One link's alpha and beta, if the all-reduce is a ring of `n_devices` (None when
        nothing moves): what `algorithms.allreduce_time_s('ring', n, ...)` takes."""
        if self.bus_bandwidth is None:
            return None
        return self.model.ring_link(self.n_devices)

    @property
    def verdict(self) -> str:
        """How well alpha and beta, from two sizes alone, predicted the others (computed)."""
        largest = format_bytes(self.sizes[-1])
        if math.isinf(self.model.beta_bytes_per_s):
            return (
                f"The {largest} all-reduce took no longer than the {TINY_BYTES}-byte one: every "
                "size here is start-up cost α, and β cannot be measured (choose larger sizes)."
            )
        unread = self.unread()
        read = [
            (r, quiet)
            for r, quiet in zip(self.residuals, self.within_noise(), strict=True)
            if r.nbytes not in unread
        ]
        said = (
            f"α = {format_seconds(self.model.alpha_s)} and "
            f"β = {format_rate(self.model.beta_bytes_per_s, 'B/s')} (from the {TINY_BYTES}-byte "
            f"all-reduce, {with_noise(self.tiny)}, and the "
            f"{largest} one, {with_noise(self.measurements[-1])}, alone) predict "
            # read 133: 'the other 4' where 5 others ran, one left out (named below)
            + (
                f"the other {len(read)} sizes"
                if len(read) == len(self.residuals)
                # read 137: '3 of the other 5 within 30%' read as a count of those within it
                else f"the {len(read)} sizes read (of the other {len(self.residuals)}; the rest "
                "left out, below)"
            )
        )
        if read:
            worst = max((r for r, _ in read), key=lambda r: abs(r.relative))
            said += (
                # rounded up, so that the worst printed beside it is never above it (read 58)
                f" within {math.ceil(round(abs(worst.relative) * 100, 6))}% (worst: "
                f"{format_bytes(worst.nbytes)}, {worst.relative:+.1%}); "
                f"{sum(q for _, q in read)} of {len(read)} within the "
                "noise of their own run and of the two runs α and β come from"
            )
            said += _one_sided([r for r, _ in read])
        reasons = {  # below an ideal by more than the floor, inside the noise: not read
            BELOW_ALPHA: (f"the {TINY_BYTES}-byte all-reduce that gives α", "which time is off; "
            "a size within that floor of it is read"),
            BELOW_BOUND: ("the bandwidth bound 2(n-1)/n·S/B", "which is off"),
        }  # fmt: skip
        for why in (FLAGGED, *reasons):
            left = sorted(s for s, w in unread.items() if w == why)
            sizes = ", ".join(format_bytes(s) for s in left)
            if left and why == FLAGGED:
                said += f" ({sizes} left out: flagged, see the warning)"
            elif left:
                ideal, tell = reasons[why]
                said += (
                    f" ({sizes} left out: faster than {ideal} by more than {NOISE_FLOOR:.0%}, "
                    f"inside the noise: too noisy to tell {tell})"
                )
        return said + "." + self._calibration_caveat()

    def unread(self) -> dict[int, str]:
        """Each size not read as a result, and why, for the verdict and both tables alike:
        `FLAGGED`, impossible (faster than α or the bandwidth bound beyond the noise); else
        `BELOW_ALPHA` or `BELOW_BOUND`, faster than it by more than the noise floor but inside
        the noise: not impossible, not a result either (read 72: a point drawn under the 'lower
        bound' was read as a result)."""
        flagged = {*self.below_bound(), *self.below_alpha()}
        why = {}
        for s, m in zip(self.sizes, self.measurements, strict=True):
            bound = self.bus_bandwidth is not None and s != self.sizes[-1]  # the last gives B
            if s in flagged:
                why[s] = FLAGGED
            elif how_below_ideal(m, self.tiny.median, noise_of(self.tiny)) == "inside":
                why[s] = BELOW_ALPHA
            elif bound and how_below_ideal(m, self.bound_s(s), self.bound_noise(s)) == "inside":
                why[s] = BELOW_BOUND
        return why

    def _calibration_caveat(self) -> str:
        """Predictions are no better than the two measurements alpha and beta come from."""
        noisy = [m for m in (self.tiny, self.measurements[-1]) if noisy_run(m)]
        if not noisy:
            return ""
        worst = max(noisy, key=lambda m: m.iqr / m.median)
        return (
            f" α and β come from noisy runs ({worst.label}: IQR {worst.iqr / worst.median:.0%} of "
            "its median), so these predictions are no better: if the machine was busy, run it "
            "again when it is quiet."
        )

    def tables(self) -> list[Table]:
        return [self._model_table(), self._sizes_table(), *self._held_out_table()]

    def _model_table(self) -> Table:
        alpha, beta = self.model.alpha_s, self.model.beta_bytes_per_s
        largest = format_bytes(self.sizes[-1])
        rows = [("α", format_seconds(alpha), f"one {TINY_BYTES}-byte all-reduce")]
        rows.append(("β", format_rate(beta, "B/s"), f"the {largest} all-reduce, α taken off"))
        verdicts, flags = [self.verdict], []
        if self.bus_bandwidth:
            bus = self.bus_bandwidth
            rows.append(
                ("bus bandwidth B", format_rate(bus, "B/s"), "β·2(n-1)/n: each rank's link")
            )
            # B comes from the largest all-reduce: its noise and the reference's, summed
            own = relative_noise(self.measurements[-1])
            copy, add = own + relative_noise(self.copy), own + relative_noise(self.add)

            def ratio(rate: float, noise: float) -> str:  # a band that reaches 0 reads nothing
                said = f"{bus / rate:.2f}x ± {bus / rate * noise:.2f}"
                return said + (" (too noisy to read: the band reaches 0)" if noise >= 1 else "")

            verdicts.append(
                f"B is {ratio(self.copy.rate, copy)} the rate at which one device copies "
                f"{largest} alone, {ratio(self.add.rate, add)} the rate at which it adds (each "
                "band: the ratio x both runs' relative noises)."
            )
        for what, m in (("copies", self.copy), ("adds", self.add)):  # with the noise B's bands use
            rows.append(
                (f"one device {what}", format_rate(m.rate, "B/s"), f"{largest} {noise_text(m)}")
            )
        if self.kind == "logical CPU" and self.sizes[-1] > FRESH_PAGES_BYTES:
            flags.append(
                f"sizes above {format_bytes(FRESH_PAGES_BYTES)} get fresh pages from the kernel "
                "for every new tensor: page faults slow them, and a β taken there "
                "under-predicts the smaller sizes"
            )
        flags += self._below_bound_flags()
        for m in (self.tiny, *self.measurements, self.copy, self.add):
            flags += [f"{m.label}: {warning}" for warning in m.warnings]
        title = f"TF all-reduce (CollectiveReduceV2, ring) on {self.n_devices} {self.kind} devices"
        return Table(title, ("quantity", "value", "from"), rows, verdicts, flags)

    def below_bound(self) -> list[int]:
        """Sizes measured faster, beyond their noise, than the bound 2(n-1)/n * S / B."""
        if self.bus_bandwidth is None:
            return []
        return [
            s
            for s, m in zip(self.sizes[:-1], self.measurements[:-1], strict=True)
            if beats_ideal(m, self.bound_s(s), self.bound_noise(s))
        ]

    def below_alpha(self) -> list[int]:
        """Sizes measured faster, beyond both noises, than the 4-byte all-reduce (alpha)."""
        return [
            s
            for s, m in zip(self.sizes, self.measurements, strict=True)
            if beats_ideal(m, self.tiny.median, noise_of(self.tiny))
        ]

    def _below_bound_flags(self) -> list[str]:
        flags = []
        below = self.below_bound()
        if below:
            sizes = ", ".join(format_bytes(s) for s in below)
            what = (
                f"{sizes} measured faster than the bandwidth bound 2(n-1)/n·S/B, whose B comes "
                f"from the {format_bytes(self.sizes[-1])} run"
            )
            flags.append(impossible(what, BOUND_CAUSES))
        below = self.below_alpha()
        if below:
            sizes = ", ".join(format_bytes(s) for s in below)
            what = (
                f"{sizes} measured faster than the {TINY_BYTES}-byte all-reduce that gives α "
                f"({format_seconds(self.tiny.median)})"
            )
            flags.append(impossible(what, ALPHA_CAUSES))
        return flags

    def _sizes_table(self) -> Table:
        rows, unread = [], self.unread()
        noise = [*self.within_noise(), True]
        for size, m, predicted, quiet in zip(
            self.sizes, self.measurements, self.predicted, noise, strict=True
        ):
            # the same words as the verdict's count and the held-out table's reading
            note = "within the noises" if quiet else "beyond the noises"
            note = "calibrates β" if size == self.sizes[-1] else note
            if size in unread:
                why = unread[size]
                note = "flagged (see the warning)" if why == FLAGGED else f"{why}, {NOT_READ}"
            rows.append(
                (
                    format_bytes(size),
                    format_seconds(m.median),
                    format_seconds(m.iqr),
                    format_seconds(predicted),
                    f"{Residual(size, m.median, predicted).relative:+.0%}",
                    note,
                )
            )
        columns = ("size per device", "measured", "IQR", "predicted", "residual", "reading")
        return Table("measured vs α + S/β (α, β from the tiny and the largest)", columns, rows)

    def _held_out_table(self) -> list[Table]:
        if self.fitted is None:
            return []
        fit = ", ".join(format_bytes(s) for s in self.fit_sizes)
        title = (
            f"{FIT_METHOD} over {fit}: α = {format_seconds(self.fitted.alpha_s)}, "
            f"β = {format_rate(self.fitted.beta_bytes_per_s, 'B/s')}; the sizes it did not see"
        )
        unread = self.unread()
        bad_inputs = sorted(s for s in self.fit_sizes if unread.get(s) == FLAGGED)
        # read 75: a fit on a time the table above does not read is not read either
        unread_inputs = sorted(s for s in self.fit_sizes if s in unread and s not in bad_inputs)
        if bad_inputs:  # a fit on an impossible time predicts nothing worth reading
            inputs = ", ".join(format_bytes(s) for s in bad_inputs)
            title += (
                f" — not a result: {inputs} among its inputs {_is(bad_inputs)} flagged (see the "
                "warning)"
            )
        elif unread_inputs:
            inputs = ", ".join(format_bytes(s) for s in unread_inputs)
            title += (
                f" — not read: {inputs} among its inputs {_is(unread_inputs)} not read above "
                "(below α or the bandwidth bound, inside the noise)"
            )
        by_size = dict(zip(self.sizes, self.measurements, strict=True))
        rows = []
        for r in self.held_out_residuals:
            m = by_size[r.nbytes]
            fit_noise = self.fit_noise_s(r.nbytes)
            inside = abs(r.measured_s - r.predicted_s) <= noise_of(m) + fit_noise
            rows.append(
                (
                    format_bytes(r.nbytes),
                    format_seconds(r.measured_s),
                    noise_text(m),
                    format_seconds(r.predicted_s),
                    f"±{fit_noise / r.predicted_s:.0%}",
                    f"{r.relative:+.0%}",
                    "not a result"
                    if bad_inputs or unread.get(r.nbytes) == FLAGGED
                    else "not read (see the title)"
                    if unread_inputs
                    else f"{unread[r.nbytes]} above, {NOT_READ}"  # as the table above (read 70)
                    if r.nbytes in unread
                    else ("within the noises" if inside else "beyond the noises"),
                )
            )
        columns = ("size per device", "measured", "noise", "predicted", "fit's noise")
        columns += ("residual", "reading")
        note = (
            "fit's noise: how far the prediction moves when each fitted size's time moves by its "
            "own noise (combined as independent: root of the sum of squares); reading: the "
            "residual against both noises"
        )
        return [Table(title, columns, rows, [note])]

    def fit_noise_s(self, nbytes: float) -> float:
        """How far the least-squares prediction for `nbytes` could move with the noise of the
        runs it was fitted to (`fit_prediction_noise_s`)."""
        by_size = dict(zip(self.sizes, self.measurements, strict=True))
        fitted = [by_size[s] for s in self.fit_sizes]
        return fit_prediction_noise_s(
            self.fit_sizes, [m.median for m in fitted], [noise_of(m) for m in fitted], nbytes
        )


def _is(sizes: list) -> str:
    return "is" if len(sizes) == 1 else "are"
