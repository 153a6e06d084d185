"""Sentences computed from measurements: a verdict reads differently when the data say otherwise.

Two times differ only when their difference is larger than their noise (the IQRs of the runs,
`NOISE_FLOOR` of the median at least): inside that band the honest sentence is "no measurable
difference". A result better than its ideal beyond the noise is impossible and is flagged with
its possible causes (not measured), never shown as a plain result.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

from d2lhelpers.core.cache import load_average, machine_busy
from d2lhelpers.core.units import (
    SECONDS,
    cores_phrase,
    enough_digits,
    format_rate,
    format_seconds,
    percent_beside,
    printed_value,
)

NOISE_FLOOR = 0.05  # even a quiet run's median moves this much between runs of a notebook
NOISY_IQR = 0.1  # IQR / median above this: too noisy to trust (pyperf, torch.utils.benchmark)
MAX_HIDDEN_BAND = 0.5  # a hidden share known only to ±50% or worse is not shown as a number
LIKELY_CAUSES = (
    "the runs were too noisy (another program, or another copy of this notebook, was running)",
    "the reference (peak or baseline) was measured low",
    "work was skipped or merged, or the clock stopped before the device finished",
)


@runtime_checkable
class Timed(Protocol):
    """What a verdict needs of a measurement (`benchmark.Measurement` has it): median and IQR.

    A protocol, not an import, so that `benchmark` may use this module's flags.
    """

    @property
    def median(self) -> float: ...

    @property
    def iqr(self) -> float: ...


@dataclasses.dataclass(frozen=True)
class Spread:
    """A value with its noise (median and IQR of repeated readings): a `Timed` not in seconds."""

    median: float
    iqr: float

    def scaled(self, factor: float) -> Spread:
        return Spread(self.median * factor, self.iqr * abs(factor))


def noise_of(m: Timed | float) -> float:
    """The band, in seconds, inside which a time could move if measured again."""
    if isinstance(m, Timed):
        return max(m.iqr, NOISE_FLOOR * m.median)
    return NOISE_FLOOR * m


def relative_noise(m: Timed) -> float:
    """`noise_of(m)` as a fraction of its median: how far a rate computed from `m` could move."""
    return noise_of(m) / m.median if m.median > 0 else float("inf")


def ratio_noise(ratio: float, *parts: Timed) -> float:
    """How far a ratio (or product) of `parts` could move: the ratio times their relative noises,
    summed (each at least the floor): a ratio's own spread, for ratios no verdict reads against
    1. A verdict uses its comparison's band instead (`compare`: both noises over the second
    value, e.g. `ParallelResult.speedup_noise`), so that it holds 1 exactly when the two do not
    differ; the two agree for a ratio near 1."""
    return ratio * sum(relative_noise(p) for p in parts)


def noise_text(m: Timed, decimals: int = 0) -> str:
    """'±16%', or '±5% (floor)' when the runs spread less than `NOISE_FLOOR`: the band is then
    the floor every verdict uses, not the runs' own spread."""
    if m.median <= 0:  # no relative band around nothing: the spread itself, as measured
        return f"(median 0, IQR {m.iqr:.3g})"
    floor = m.iqr < NOISE_FLOOR * m.median
    return f"±{relative_noise(m):.{decimals}%}" + (" (floor)" if floor else "")


def with_noise(m: Timed, unit: str | None = None, decimals: int = 0) -> str:
    """'1.83 ms ±16%', or with `unit` a rate, '2.3 ktok/s ±5% (floor)' (`decimals` more past
    the usual for the value and its noise): one home for a value printed with its band."""
    if unit is None:
        return f"{format_seconds(m.median, decimals)} {noise_text(m, decimals)}"
    return f"{format_rate(m.median, unit, 1 + decimals)} {noise_text(m, decimals)}"


def noisy_run(m: Timed) -> bool:
    """Whether a run's spread is too wide for any verdict drawn from it (IQR above `NOISY_IQR`)."""
    return m.iqr > NOISY_IQR * m.median


def agree_within_noise(subject: str, runs, shared: str) -> str:
    """'{subject} agree within their noise, so {shared}': unless a run among them is noisy
    (`noisy_run`), when agreeing within a band that wide shows too little (read 76: ±88% and
    ±71% 'agree', so 'both speedups share one yardstick')."""
    if any(noisy_run(m) for m in runs):
        return (
            f"{subject} agree within their noise, but a run among them spread by more than "
            f"{NOISY_IQR:.0%} of its median: too noisy to tell whether {shared}"
        )
    return f"{subject} agree within their noise, so {shared}"


def parts_between_runs(
    parts: list[tuple[str, Timed, Timed]],
    shared: str,
    other: str = "the other run",
    show=format_seconds,
    holds: str = "",
) -> str:
    """Two runs of one experiment, part by part ((name, this run's, the other's)): where a part
    differs beyond both noises, the machine's speed moved between the runs, and `holds` says
    what that leaves (read 54: 10.39 ms against 13.95 ms, unsaid; read 89: one verdict 'no
    measurable difference', the rerun's '1.84x faster', uncompared). `show` prints a value
    (times by default; rates for capacities)."""
    said, moved = [], False
    for name, mine, theirs in parts:
        c = compare(mine, theirs)
        moved = moved or c.measurable
        where = (
            "within both noises"
            if not c.measurable
            else f"{f'{c.ratio:.2f}x, ' if c.b else ''}beyond both noises ({show(c.noise)})"
        )
        e = digits_that_agree(mine, theirs, c.measurable, show)
        said.append(
            f"{name}: {show(mine.median, e)} {noise_text(mine, e)} here, "
            f"{show(theirs.median, e)} {noise_text(theirs, e)} in {other}: {where}"
        )
    said.append(
        "a part moved between the runs beyond both noises (the machine's speed or load "
        f"changed: a hypothesis, not measured), so {holds or EACH_RUN_HOLDS}"
        if moved
        else agree_within_noise("the parts", [m for _, *pair in parts for m in pair], shared)
    )
    return "; ".join(said)


def digits_that_agree(a: Timed, b: Timed, measurable: bool, show=format_seconds) -> int:
    """Decimals past `show`'s usual ones (up to 3) at which a and b and their noises, read back
    from the printed digits, give `compare`'s verdict (read 155: '3.3 ktok/s ±5%' and '3.7
    ktok/s ±5%' printed beside 'within both noises')."""
    if a.median <= 0 or b.median <= 0:
        return 0  # no relative noise printed to read back

    def agrees(e: int) -> bool:
        shown = [(printed_value(show(m.median, e)), noise_text(m, e)) for m in (a, b)]
        return printed_comparison(*shown).measurable == measurable

    return enough_digits(agrees, 0, 3, 3)


def printed_comparison(a: tuple[float, str], b: tuple[float, str]) -> Comparison:
    """`compare` as a reader rebuilds it from printed digits: each value (as read back) and its
    printed noise ('±5.0% (floor)'), the band their relative noises' share of each, summed."""
    (x, nx), (y, ny) = ((v, float(t.split("±")[1].split("%")[0]) / 100) for v, t in (a, b))
    return Comparison(x, y, x * nx + y * ny)


EACH_RUN_HOLDS = (
    "each run's verdict holds against its own parts, and neither run alone is the result"
)


def noisy_warning(m: Timed) -> str | None:
    """The warning every table prints for a run too noisy for a verdict (`noisy_run`), with the
    causes this package can name but not measure; None for a run that is not."""
    if not (m.median > 0 and noisy_run(m)):
        return None
    share = m.iqr / m.median
    shown = percent_beside(share, NOISY_IQR, 1)
    return f"noisy: IQR is {shown} of the median (above {NOISY_IQR:.0%}); {NOISY_CAUSES}"


NOISY_CAUSES = (
    "possible causes, not measured here: another program, this experiment's own threads or "
    "processes competing for the cores, or runs too short"
)


def median_of(m: Timed | float) -> float:
    return m.median if isinstance(m, Timed) else float(m)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """`a` against `b`: their ratio, and whether the difference is outside both noises."""

    a: float
    b: float
    noise: float

    @property
    def ratio(self) -> float:
        return self.a / self.b

    @property
    def measurable(self) -> bool:
        return abs(self.a - self.b) > self.noise

    @property
    def a_faster(self) -> bool:
        return self.measurable and self.a < self.b

    @property
    def a_slower(self) -> bool:
        return self.measurable and self.a > self.b

    @property
    def outcome(self) -> str:
        """For a table's cell: 'faster', 'slower' or 'no measurable difference' (a against b)."""
        if self.a_faster:
            return "faster"
        return "slower" if self.a_slower else "no measurable difference"


def compare(a: Timed | float, b: Timed | float) -> Comparison:
    """Compare two times; the noise band is the sum of their noises."""
    return Comparison(median_of(a), median_of(b), noise_of(a) + noise_of(b))


def faster_or_slower(a: Timed | float, b: Timed | float, a_name: str, b_name: str):
    """'A is 1.9x faster than B', 'A is 1.3x slower than B' or 'no measurable difference'."""
    c = compare(a, b)
    if c.a_faster:
        return f"{a_name} is {1 / c.ratio:.2f}x faster than {b_name}"
    if c.a_slower:
        return f"{a_name} is {c.ratio:.2f}x slower than {b_name}"
    shown = times_within(c.a, c.b, c.noise)
    return (
        f"no measurable difference between {a_name} and {b_name} "
        f"({shown[0]} vs {shown[1]}, within the noise of {shown[2]})"
    )


def times_within(a: float, b: float, noise: float) -> tuple[str, str, str]:
    """a, b and noise as `format_seconds` prints them, with more decimals (up to 3 more) where
    those digits would show a gap as wide as the noise for a gap inside it (read 69: "10.52 ms
    vs 9.52 ms, within the noise of 1.00 ms"), or two different times alike (read 166: "6.48 ms
    vs the model's 6.48 ms ... below it")."""
    plain = tuple(format_seconds(x) for x in (a, b, noise))
    units = {p.split()[-1] for p in plain[:2]}
    if len(units) != 1:
        return plain  # mixed units: the digits differ anyway
    (unit,) = units
    scale = SECONDS[unit]
    decimals = len(plain[1].split()[0].partition(".")[2])

    def shown(d: int) -> list[float]:
        return [round(x / scale, d) for x in (a, b, noise)]

    def apart(d: int) -> bool:
        x, y, n = shown(d)
        return round(abs(x - y), d) < n and (x != y or a == b)

    d = enough_digits(apart, decimals, decimals + 3)
    if d is None or d == decimals:  # as printed, or no digits show it
        return plain
    return tuple(f"{x:.{d}f} {unit}" for x in shown(d))  # the noise in their unit too


def beats_ideal(measured: Timed | float, ideal: float, ideal_noise: float = 0.0) -> bool:
    """Whether `measured` is faster than its ideal by more than the noise: impossible."""
    return median_of(measured) < ideal - noise_of(measured) - ideal_noise


def how_below_ideal(
    measured: Timed | float, ideal: float, ideal_noise: float = 0.0, floor: float = NOISE_FLOOR
) -> str | None:
    """How a time sits below its ideal: None when not by more than `floor` (a share of the
    ideal); "beyond" the noise (impossible); "inside" it (too noisy to tell which time is off)."""
    if median_of(measured) >= ideal * (1 - floor):
        return None
    return "beyond" if beats_ideal(measured, ideal, ideal_noise) else "inside"


def against_limit(value: float, limit: float, noise: float) -> Comparison:
    """`value` against `limit` (a rate's peak, a ceiling or yardstick such as the cores' baseline),
    the one rule for a rate read against one: they differ when the gap exceeds `noise`, the
    value's and the limit's relative noises summed, as a fraction of the limit."""
    return Comparison(value, limit, noise * limit)


def above_limit(value: float, limit: float, noise: float) -> bool:
    """Whether `value` exceeds `limit` beyond `noise` (`against_limit`'s rule)."""
    return value > limit * (1 + noise)  # written so: exactly at the edge is not beyond


class TwoParts:
    """Two parts timed alone (`parts`), one call's `launch`, and the two in one call
    (`combined`): the ideals that combined call is read against, and the share it hid. A
    result class that has those three mixes this in (notebooks 02 and 05), with `sum_name` and
    a `not_a_result()` that is truthy where the share is not to be shown."""

    parts: tuple[Timed, Timed]
    launch: Timed
    combined: Timed
    sum_name: str  # how the one after the other ideal is written: 'run + copy - launch'

    @property
    def shorter(self) -> float:
        return min(p.median for p in self.parts)

    @property
    def ideal_sequential(self) -> float:
        """Both parts less the launch: one function pays one launch, two calls paid two."""
        return sum(p.median for p in self.parts) - self.launch.median

    @property
    def ideal_sequential_noise(self) -> float:
        return sum(noise_of(p) for p in self.parts) + noise_of(self.launch)

    @property
    def ideal_overlapped(self) -> float:
        return max(p.median for p in self.parts)

    @property
    def ideal_overlapped_noise(self) -> float:
        return noise_of(max(self.parts, key=lambda p: p.median))

    @property
    def hidden_fraction(self) -> float:
        """The share of the shorter part that running both in one call hid: (the one after the
        other ideal - the combined time) / the shorter part; 0 when nothing was hidden. The raw
        number, unchecked."""
        return (self.ideal_sequential - self.combined.median) / self.shorter

    @property
    def hidden_ceiling(self) -> float:
        """The most `hidden_fraction` can be: 1 - launch / shorter. A combined call that takes
        max(parts), all of the shorter part hidden, hides that much and no more, since the one
        after the other ideal is already less the launch one call saves."""
        return 1 - self.launch.median / self.shorter

    @property
    def hidden_noise(self) -> float:
        """How far `hidden_fraction` could move: the four times' noises over the shorter part."""
        return (self.ideal_sequential_noise + noise_of(self.combined)) / self.shorter

    def hidden_text(self) -> str:
        """The hidden share as shown: a number only when the run is a result (the class's
        `not_a_result()` is falsy), its band at most `MAX_HIDDEN_BAND` and the share beyond it
        (read 164: '71% ± 249%' beside 'no time measurably hidden')."""
        h, band = self.hidden_fraction, self.hidden_noise
        if self.not_a_result():
            return "not shown (see the warnings)"
        if band > MAX_HIDDEN_BAND:  # read 147: the cut-off said, and the value kept back
            value = f"{h:.0%} " if 0 <= h <= 1 else ""  # a share outside 0..100% is noise
            return (
                # read 159: '±50%, a band wider than the ±50%': the digits that show it wider
                f"too noisy to tell: {value}±{percent_beside(band, MAX_HIDDEN_BAND)}, a band "
                f"wider than the ±{MAX_HIDDEN_BAND:.0%} this notebook reads a share from"
            )
        if h + band < 0:
            lost = self.combined.median - self.ideal_sequential
            return f"none: took {format_seconds(lost)} longer than {self.sum_name}"
        if abs(h) <= band:
            return f"none measurable (±{band:.0%})"
        return f"{h:.0%} ±{band:.0%}"


def numbered(items) -> str:
    """'(1) a; (2) b': causes, in the order a flag lists them."""
    return "; ".join(f"({i}) {item}" for i, item in enumerate(items, start=1))


def impossible(what: str, causes=LIKELY_CAUSES) -> str:
    """The flag for a result that cannot be true, with its possible causes (not measured)."""
    listed = numbered(causes)
    return f"{what}: impossible, so not a result. Possible causes, not measured here: {listed}"


def fraction_flags(value: float, name: str, low: float = 0.0, high: float = 1.0) -> list[str]:
    """Flags for a fraction outside [low, high] (a hidden share above 100%, a negative bubble)."""
    if low <= value <= high:
        return []
    return [impossible(f"{name} of {value:.0%} is outside {low:.0%}..{high:.0%}")]


def agreeing_digits(ratio: float, band: float, beyond: bool) -> int:
    """Decimals (2 to 6) for a ratio and its relative band that are enough for a reader to
    see from the printed digits what the verdict says: 0.58x ± 42% reads as on the band's edge
    (read 60), 0.581x ± 42.2% as beyond it; read 166: 0.8953x ± 0.1047 'measurably less', where
    only a fifth decimal shows it."""
    return enough_digits(
        lambda d: (round(abs(round(ratio, d) - 1), d) > round(band, d)) == beyond, 2, 6, past=6
    )


def rates_as_judged(a: Timed, b: Timed, unit: str) -> tuple[str, str]:
    """Two rates, each with its `noise_text`, as `format_rate` prints them, or with a shared
    prefix and up to 4 decimals, and their noises with up to 2 decimals, where fewer digits
    would let a reader, from the printed medians and bands, reach the other verdict than
    `compare(a, b)` (read 116: 3.2 ktok/s ±5% 'within both noises' of 2.8 ktok/s ±8%; read 159:
    4.1410 ktok/s ±6% beside 3.7076 ktok/s ±5%, whose noises' digits decided it), or print two
    different rates as one."""
    beyond = compare(a, b).measurable

    def reads(texts: list[str]) -> bool:
        shown = [(printed_value(t), t.partition(" ")[2].partition(" ")[2]) for t in texts]
        # read 160: 'above 1x one device's (3.4 ktok/s)' beside 3.4 ktok/s: apart where they are
        apart = a.median == b.median or shown[0][0] != shown[1][0]
        return printed_comparison(*shown).measurable == beyond and apart

    def plain(e: int) -> list[str]:
        return [f"{format_rate(m.median, unit)} {noise_text(m, e)}" for m in (a, b)]

    prefix = format_rate(max(a.median, b.median), unit).split()[1]

    def shared(d: int, e: int) -> list[str]:
        return [
            f"{m.median / _SCALES[prefix.removesuffix(unit)]:.{d}f} {prefix} {noise_text(m, e)}"
            for m in (a, b)
        ]

    for e in range(3):  # the noises' decimals, then the rates'; at the last, the most of both
        if reads(plain(e)):
            return tuple(plain(e))
        d = enough_digits(lambda d, e=e: reads(shared(d, e)), 2, 4, past=4 if e == 2 else None)
        if d is not None:
            return tuple(shared(d, e))
    raise AssertionError("unreachable: the last pass always returns")


_SCALES = {"T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3, "": 1.0}  # `format_rate`'s prefixes


def higher_or_lower(a: Timed | float, b: Timed | float, a_name: str, b_name: str) -> str:
    """'A is 0.82x B: lower beyond the noise (±0.06 on the ratio)', '... higher ...', or 'no
    measurable difference': for rates and counts, where neither direction means 'faster'."""
    c = compare(a, b)
    if not c.b:  # no ratio to a zero
        said = f"{a_name} is {c.a:.3g} against {b_name} of 0"
        return said + (": higher" if c.measurable else ": no measurable difference")
    digits = agreeing_digits(c.ratio, c.noise / c.b, c.measurable)
    said = f"{a_name} is {c.ratio:.{digits}f}x {b_name}"
    # its parts, each noise in its own value's units (read 69: readers rebuilt ratio x the sum)
    parts = (
        f"the first's ±{noise_of(a) / c.a:.0%} x {c.ratio:.{digits}f} + "
        if c.a
        else f"the first's {noise_of(a) / c.b:.0%} of the second + "
    ) + f"the second's ±{noise_of(b) / c.b:.0%}"
    # the band on the ratio itself (read 144: '±18%' beside 1.70x read as 18% of 1.70)
    noise = f"the noise (±{c.noise / c.b:.{digits}f} on the ratio: {parts})"
    if not c.measurable:
        return f"{said}: no measurable difference, within {noise}"
    return f"{said}: {'lower' if c.a < c.b else 'higher'} beyond {noise}"


def model_test(measured: Timed | float, model: Timed | float, alternative: float) -> str:
    """'missed', 'held', 'noisy', 'noisy yardstick' or 'untestable': whether `measured` matched
    `model` within both noises, and whether that agreement means anything. Never 'held' on a
    noisy run (`noisy_run`, as everywhere else), nor against a model scaled from one (read 96:
    'held' against one device's ±48% step); and a model holds only where this run could have
    told it from `alternative` (what a reader would expect with no model at all, e.g. no gain
    over one device): when the same band covers both, the test could not have failed
    ('untestable'). A model within the noise floor of the alternative predicts it: only a miss
    tests it."""
    c = compare(measured, model)
    if c.measurable:
        return "missed"
    if isinstance(measured, Timed) and noisy_run(measured):
        return "noisy"
    if isinstance(model, Timed) and noisy_run(model):
        return "noisy yardstick"
    gap = abs(median_of(model) - alternative)
    if gap <= NOISE_FLOOR * abs(alternative):  # the same prediction as no model at all
        return "held"
    return "held" if gap > c.noise else "untestable"


def took_turns(saving: str, where: str = "") -> str:
    """What ops a trace shows "at the same time" on one usable core were: the end of a clause
    that says they are expected to have taken turns (notebooks 02 and 03)."""
    return (
        "in flight at once but not computing at once: one core runs one thread at a time, and a "
        f"trace shows ops in flight, not which ran; the verdict from the times{where} says "
        f"whether {saving} saved any time"
    )


UNTESTED = {  # why `model_test` could not call a model held, for a sentence
    "noisy": f"its runs spread by more than {NOISY_IQR:.0%} of their median",
    "untestable": "its noise band covers the no-model outcome too",
    "noisy yardstick": (
        f"the runs its model is scaled from spread by more than {NOISY_IQR:.0%} of their median"
    ),
}


def slower_cause(cores: int, beyond_serial: bool = False) -> str:
    """Why a run was slower than its model, as far as the load average can tell: it counts this
    run's own busy threads too, so it can only make another program more or less likely. Slower
    even than the same work one after the other (`beyond_serial`), missing overlap cannot explain
    it: something slowed the work itself."""
    busy = machine_busy(cores)
    if beyond_serial:
        return (
            "slower even than the same work one after the other, so missing overlap cannot "
            "explain it: something slowed the work itself (contention for the cores or memory, "
            "or another program" + (f"; {busy}" if busy else "") + ")"
        )
    if busy:
        return (
            f"{busy}: possibly another program on the cores, or the work did not keep the devices "
            "busy at once"
        )
    load = load_average()
    seen = (
        "no load average can be read here"
        if load is None
        else (
            f"the load average ({load:.1f} on {cores_phrase(cores)}) does not show another "
            "program beyond what this run's own threads could be (it counts them too, and "
            "cannot see other tenants of a shared host)"
        )
    )
    return (  # read 84: 'does not point to another program' beside pytest's two workers
        f"{seen}, so the cause is not measured here; hypotheses: another program shared the "
        "cores, or the work did not keep the devices busy at once (too short, or the runtime's "
        "threads)"
    )
