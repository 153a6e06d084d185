"""Notebook 01's sentences on its own cells: k chains at once against one, two separate calls,
and the devices' combined rate against the usable cores' baseline, each read from the noise."""

from __future__ import annotations

from d2lhelpers.core.concurrency import devices_at_once, slowdown_model
from d2lhelpers.core.units import (
    cores_phrase,
    format_rate,
    format_seconds,
    plural,
    ratio_beside,
    usable_cores,
)
from d2lhelpers.core.verdicts import (
    LIKELY_CAUSES,
    UNTESTED,
    Comparison,
    above_limit,
    against_limit,
    agreeing_digits,
    impossible,
    noise_of,
    noisy_run,
    relative_noise,
    slower_cause,
    with_noise,
)
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.timing.peaks import (
    baseline_below_peak,
    baseline_chain,
    baseline_noise,
    baseline_not_kept,
    below_own_peak,
)


def at_once_verdict(both: Measurement, one, kind: str, k: int = 2, cores=None) -> str:
    """k chains in one graph against each chain alone: at the same time, shared cores, or
    neither. `one`: one chain alone, or a list of each chain alone (then k is its length). The
    model is the least time the chains allow: the longest alone, or all of them added over the
    devices that can compute at once, whichever is more (read 166: 2 x the longer of 28.76 and
    26.08 ms read 51.02 ms as impossible on one core, where their sum is 54.84 ms)."""
    cores = usable_cores() if cores is None else cores
    chains = list(one) if isinstance(one, (list, tuple)) else [one] * k
    k, alike = len(chains), len({id(m) for m in chains}) == 1
    longest = max(chains, key=lambda m: m.median)
    ratio = both.median / longest.median
    name = "one chain" if alike else f"the {'longer' if k == 2 else 'longest'} chain alone"
    said = f"{plural(k, 'chain')} launched together in one graph took {ratio:.2f}x {name}"
    if slowdown_model(k, kind, cores) is None:
        return said + " (virtual GPUs share one chip: no model is checked)"
    at_once = devices_at_once(k, kind, cores)
    total = sum(m.median for m in chains)
    turns = total / at_once > longest.median
    model, model_noise = (
        (total / at_once, sum(noise_of(m) for m in chains) / at_once)
        if turns
        else (longest.median, noise_of(longest))
    )
    want = model / longest.median
    c = Comparison(both.median, model, noise_of(both) + model_noise)
    how = ""
    if turns and not alike:  # the times it adds, one digit past the sum to add up to it
        added = " + ".join(format_seconds(m.median, 1) for m in chains)
        how = f": the chains alone take {added} = {format_seconds(total)}, {at_once} at a time"
    where = (
        f"the model's {want:.2f}x ({cores_phrase(cores)}{how})"
        if kind == "logical CPU"
        else "1.00x"
    )
    if c.a_faster:
        return impossible(f"{said}, faster than {where}")
    if c.a_slower:  # beyond the band, which holds both runs' spread: a miss however noisy
        noise = noise_of(both) + sum(noise_of(m) for m in chains)
        serial = Comparison(both.median, total, noise)
        noisy = noisy_run(both) or any(noisy_run(m) for m in chains)
        beyond = " beyond both runs' noise, wide as it is" if noisy else ""
        return f"{said}, slower than {where}{beyond}: {slower_cause(cores, serial.a_slower)}"
    if noisy_run(both) or any(noisy_run(m) for m in chains):
        return (
            f"{said}; too noisy to check it against {where}: {UNTESTED['noisy']}, and this "
            "time is within their noise of the model's"
        )
    said += f", as {where} says (within ±{c.noise / longest.median:.2f}x: both runs' noise"
    # read 154: 0.98x beside the model's 1.00x, below it within the noise, was read bare
    said += ", below it by less than that: not read as faster)" if c.a < c.b else ")"
    inferred = "(an inference from the timing and the core count, not observed)"
    if want == 1.0:  # read 108: the band printed, as every verdict's
        return f"{said}: consistent with their running at the same time {inferred}"
    return f"{said}: more chains than cores, consistent with their taking turns on them {inferred}"


def single_samples_verdict(pairs) -> str:
    """The seed's single samples (`Benchmark`s, `.elapsed`) against the repeated runs of the same
    calls (`Measurement`s), in (sample, runs) pairs: which samples fall outside the band every
    verdict here reads (read 85: one sample at 1.95x one chain beside a median at 1.01x)."""
    outside = [(b, m) for b, m in pairs if abs(b.elapsed - m.median) > noise_of(m)]
    samples = ", ".join(format_seconds(b.elapsed) for b, _ in pairs)
    if not outside:
        return (
            f"Each single sample above ({samples}) lies within the band of its repeated runs: "
            "this time one sample agreed with them, which it need not"
        )

    def ratio(b, m) -> str:  # read 160: '1.05x' beside '±5%' listed as outside: the digits
        r, edge = b.elapsed / m.median, noise_of(m) / m.median
        return ratio_beside(r, 1 + edge if r > 1 else 1 - edge)

    said = "; ".join(
        f"'{b.description}' {format_seconds(b.elapsed)} is {ratio(b, m)}x the "
        f"median of its {len(m.times)} runs ({with_noise(m)})"
        for b, m in outside
    )
    return (
        f"Single samples outside the band of their repeated runs: {said}. Those calls ran "
        "differently from their repeats (why is not measured here), so a ratio of single samples "
        "can mislead; the verdicts here read the medians"
    )


def separate_calls_verdict(
    separate: Measurement, first: Measurement, second: Measurement, at_once: int = 2
) -> str:
    """Two calls one after the other in Python: did their work overlap, or run in sequence?
    `first` and `second`: each call alone, the same work on like devices (notebook 01's chains).
    `at_once`: how many of the two devices can compute at the same time (`devices_at_once`);
    with 1, any overlap beyond the noise is impossible."""
    longer = max(first, second, key=lambda m: m.median)
    total = first.median + second.median
    noise = noise_of(separate) + noise_of(first) + noise_of(second)
    said = f"two separate calls took {separate.median / longer.median:.2f}x the longer call alone"
    sum_is = f"the sum of both is {total / longer.median:.2f}x"
    as_one = Comparison(separate.median, longer.median, noise_of(separate) + noise_of(longer))
    in_turn = Comparison(separate.median, total, noise)
    if as_one.a_faster:
        return impossible(f"{said}, faster than that call alone")
    apart = Comparison(first.median, second.median, noise_of(first) + noise_of(second))
    if apart.measurable:  # read 84: the same work on like devices, 71 ms against 52 ms
        return (
            f"{said}; but the two calls alone, the same work on like devices, took "
            f"{format_seconds(first.median)} and {format_seconds(second.median)}, apart beyond "
            "their noise, so neither the longer nor their sum is a steady yardstick: not read "
            "(run it again)"
        )
    if at_once < 2 and in_turn.a_faster:  # less than the sum, beyond the noise, on one core
        return impossible(
            f"{said}; {sum_is}: less, beyond the noise, though at most {at_once} of the devices "
            "can compute at a time here, so the two could only take turns"
        )
    if not as_one.measurable and not in_turn.measurable:  # read 76: both, so neither is read
        return (
            f"{said}; {sum_is}: within the noise of both, so too noisy to tell whether their work "
            "overlapped or took turns"
        )
    if not as_one.measurable:
        return f"{said}, within the noise of one: their work overlapped"
    if not in_turn.measurable:
        return (
            f"{said}; {sum_is}, within the noise: consistent with one after the other (or "
            "with both at once, starved of cores: timing alone cannot tell which)"
        )
    if in_turn.a_faster:
        return f"{said}; {sum_is}: less, so they overlapped in part"
    return f"{said}; {sum_is}: even more, so something else slowed them"


def baseline_verdict(
    together: Measurement, one: Measurement, baseline: dict, kind: str, k: int = 2
) -> str:
    """k devices' combined rate against the usable cores' baseline, from the noise of both.

    Virtual GPUs share the baseline's chip, so together they can at best match it; separate GPUs
    each bring a chip (the baseline is one of them). Logical CPU devices share its cores, but run
    independent chains of one thread each, which can get more from them than the baseline's one
    chain split across threads: for them it is a yardstick (`_yardstick`), not a ceiling.
    """
    base = baseline["flops_per_s"]
    together_best = k if kind == "GPU" else 1
    independent = kind == "logical CPU" and k > 1  # one thread each: a yardstick, not a ceiling
    d = _digits(together, base, together_best, baseline)  # 1 for logical CPUs: a yardstick
    together_line = (
        f"{plural(k, 'device')} together: {format_rate(together.rate)} = "
        f"{together.rate / base:.{d}f} of the usable cores' baseline {format_rate(base)}"
        f"{baseline_chain(baseline)}"
    )
    d = _digits(one, base, 1, baseline)
    one_line = f"one device: {format_rate(one.rate)} = {one.rate / base:.{d}f} of the baseline"
    # Only a measured peak can show the baseline low: k x one device's peak is a ceiling that
    # devices computing at once need not reach (they share memory bandwidth), not a measurement.
    low = baseline_below_peak(one, baseline, "one device's")
    if low:  # the yardstick itself is off: nothing is read against it, not even a ratio
        return (
            f"{plural(k, 'device')} together: {format_rate(together.rate)}; one device: "
            f"{format_rate(one.rate)}; neither read against the baseline {format_rate(base)}: "
            f"{low}"
        )
    one_aside, together_aside = _above_own_peak(one), _above_own_peak(together)
    if one_aside:  # read 74: its line above says 'not a result'; so does this one
        # no rate after the word 'baseline': make one-core reads the first as the baseline's
        one_line = f"one device: {one_aside}, and not read against the baseline"
    elif not independent and _above(together, base, together_best, baseline):  # baseline in doubt
        one_line += " (not read against it: the line above puts the baseline in doubt)"
    else:
        one_line += _against(one, base, 1, baseline, plural=False)
    if together_aside:
        read = f"; not read against it: {together_aside}"
    elif independent:
        read = _yardstick(together, base, baseline)
    else:
        read = _against(together, base, together_best, baseline, plural=True)
    return "\n".join([together_line + read, one_line, *baseline_not_kept(baseline)])


def _above_own_peak(m: Measurement) -> str:
    """Why `m`'s rate is not read against the baseline, when it is above its own best peak
    (within the noise or beyond it): its own line says 'not a result', so no verdict may rest
    on it; else ''. Where its peak was measured again since, higher (`peak_now`), where the rate
    sits against that, within both noises or beyond them (read 176: 1.05 of 170.9 GFLOP/s,
    beside a later 179.9)."""
    peak = m.best_peak
    if m.rate is None or not peak or m.rate <= peak:
        return ""
    later, since = "", m.peak_now
    if since > peak:
        noise = relative_noise(m) + m.peak_noise_now
        side = "above" if m.rate > since else "below"
        where = (
            f"{side} it beyond both noises"
            if against_limit(m.rate, since, noise).measurable
            else "within both noises of it"
        )
        later = (
            f"; the peak was measured again after it, at {format_rate(since)}, and this rate is "
            f"{where} (±{noise:.0%}: its own and that peak's; its line's verdict stands: a rerun "
            "of its cell reads it against that)"
        )
    return (
        f"{format_rate(m.rate)} is {m.rate / peak:.2f} of "
        + (
            f"its own measured peak {format_rate(peak)}"
            if m.peak_factor == 1
            else m.peak_words(peak).replace("the ceiling", "its ceiling", 1)
        )
        + f", above it, so not a result (as its line above says){later}"
    )


def _noise(m: Measurement, baseline: dict) -> float:
    return relative_noise(m) + baseline_noise(baseline)


def _digits(m: Measurement, base: float, times: int, baseline: dict) -> int:
    """Decimals (2 to 4) for `m`'s ratio to the baseline, and 2 fewer for its noise in percent,
    that show from the printed digits the side of `times` x the baseline its verdict read (read
    142: '0.87 ±0.13' beside 'measurably below', notebook 03's line, which uses this rule too)."""
    noise, limit = _noise(m, baseline), times * base
    return agreeing_digits(m.rate / limit, noise, against_limit(m.rate, limit, noise).measurable)


def _above(m: Measurement, base: float, times: int, baseline: dict) -> bool:
    """Whether `m`'s rate is above `times` x the baseline beyond both noises."""
    return above_limit(m.rate, times * base, _noise(m, baseline))


def _yardstick(m: Measurement, base: float, baseline: dict) -> str:
    """Logical CPU devices together against the baseline: the same cores, but independent
    chains of one thread each, which can get more from them than one chain split across threads
    (TensorFlow's default threading): a yardstick, read within both noises, not a ceiling."""
    noise = f"{_noise(m, baseline):.{_digits(m, base, 1, baseline) - 2}%}"
    if _above(m, base, 1, baseline):
        said = (
            f"; above it by more than the noise of {noise}: independent chains, one thread "
            "each, got more from these cores than TensorFlow's default threading on one chain "
            "(the baseline is a yardstick, not a ceiling; hypotheses: one matmul split across "
            "threads pays for the split, and a rate depends on the matrix size, which the "
            "baseline's chain need not share)"
        )
        if baseline.get("from_cache"):
            said += (
                f"; the baseline is {baseline['measured_at']}'s, from the cache "
                "(d2l.machine_baseline_rate(refresh=True) measures it again)"
            )
        return said
    if not against_limit(m.rate, base, _noise(m, baseline)).measurable:
        if noisy_run(m):  # read 78: a ±68% run 'matches' anything; notebook 03's rule
            return f"; within the noise of {noise}, too noisy to check: {UNTESTED['noisy']}"
        return f"; they match it, within the noise of {noise}"
    return f"; below it by more than the noise of {noise}" + _own_peak(m, 1, baseline, True)


def _own_peak(m: Measurement, times: int, baseline: dict, plural: bool) -> str:
    why = (
        ": the baseline runs TensorFlow's default threads with oneDNN on, the devices one thread "
        "per op, as the package runs each (its design, not shown by a cell)"
    )
    return below_own_peak(m, baseline, times, "their" if plural else "its", why)


def _against(m: Measurement, base: float, times: int, baseline: dict, plural: bool) -> str:
    """How `m`'s rate reads against the most it can reach: `times` x the baseline `base`."""
    noise = _noise(m, baseline)
    shown = f"{noise:.{_digits(m, base, times, baseline) - 2}%}"
    said = f"; at best {'they' if plural else 'it'} can "
    said += "match it" if times == 1 else f"reach {times}x it"
    said += " (expected, not measured)"  # a bound from how the devices and baseline run
    if _above(m, base, times, baseline):
        above = f"above that by more than the noise of {shown}"
        if baseline.get("from_cache"):  # measured on the machine as it was in an earlier run
            stale = (
                f"the baseline was measured low: it is {baseline['measured_at']}'s, from the cache"
            )
            return f"{said}; " + impossible(above, (stale, *LIKELY_CAUSES))
        return f"{said}; " + impossible(above)
    if not against_limit(m.rate, times * base, noise).measurable:
        if noisy_run(m):  # read 78: 'and does, within the noise of 76%' from a ±68% run
            return f"{said}; within the noise of {shown}, too noisy to check: {UNTESTED['noisy']}"
        return f"{said}, and {'do' if plural else 'does'}, within the noise of {shown}"
    said += f": below that by more than the noise of {shown}"
    return said + _own_peak(m, times, baseline, plural)
