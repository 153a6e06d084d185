"""Notebook 06 beside `make hosts`: the learner's loopback run next to the committed run of the
same worker code across two network namespaces joined by a tbf-shaped link of known rate
(`benchmarks/hosts.py`, results/hosts/two-namespaces.json). Reading the file needs no root.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

from d2lhelpers.collectives.costs import (
    bus_bandwidth_bound_s,
    fit_alpha_beta,
    fit_prediction_noise_s,
)
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import cores_phrase, format_bytes, format_rate, format_seconds
from d2lhelpers.core.verdicts import NOISE_FLOOR
from d2lhelpers.lessons.l06_multi_process.allreduce import AllReduceJobResult, alpha_text
from d2lhelpers.lessons.l06_multi_process.training import TrainingSweepResult, scaling_sentence
from d2lhelpers.references import RESULTS_DIR

HOSTS_FILE = RESULTS_DIR / "hosts" / "two-namespaces.json"


@dataclasses.dataclass
class HostsReferenceResult(Reported):
    """This run's loopback all-reduce and training beside the committed two-host run."""

    job: AllReduceJobResult
    sweep: TrainingSweepResult | None
    hosts: dict | None  # the committed file, or None when there is none

    def tables(self) -> list[Table]:
        fit = self.job.fitted
        band = self.job.alpha_band_s
        here = [
            "loopback, this run",
            alpha_text(fit.alpha_s, band),
            "unbounded"
            if math.isinf(fit.beta_bytes_per_s)
            else format_rate(fit.beta_bytes_per_s, "B/s"),
            _break_even(fit.alpha_s, fit.beta_bytes_per_s, band),
            "- (no set rate)",
            "-",
        ]
        if self.sweep is not None and self.sweep.one is not None and len(self.sweep.jobs) > 1:
            here.append(scaling_sentence(self.sweep.jobs[1], self.sweep.one))
        else:
            here.append("")
        columns = (
            "link",
            "alpha",
            "beta (fitted)",
            "break-even size (alpha x beta)",
            "beta / payload rate (/ set rate)",
            "held-out residuals (noise: the run's, the fit's)",
            "2 workers vs 1 (training)",
        )
        if self.hosts is None:
            note = f"no committed two-host results ({HOSTS_FILE.name}): `make hosts` makes them"
            return [Table("all-reduce and training: loopback", columns, [tuple(here)], [note])]
        rows = [tuple(here)]
        for found in sorted(self.hosts["allreduce"], key=lambda f: -f["rate_bit_s"]):
            held = ", ".join(f"{h['residual']:+.0%}{_noises(h)}" for h in found["held_out"])
            slowest = found["rate_bit_s"] == min(f["rate_bit_s"] for f in self.hosts["allreduce"])
            band = _committed_alpha_band_s(found)
            rows.append(
                (
                    f"two hosts, {found['rate_bit_s'] / 1e6:.0f} Mbit/s link",
                    alpha_text(found["alpha_s"], band),
                    format_rate(found["beta_bytes_per_s"], "B/s"),
                    _break_even(found["alpha_s"], found["beta_bytes_per_s"], band),
                    f"{found['beta_over_payload_rate']:.2f} ({found['beta_over_rate']:.2f})",
                    held,
                    _training_words(
                        self.hosts["training"],
                        found,
                        self.hosts["link"].get("burst_bytes"),
                        self.hosts["link"].get("payload_share"),
                    )
                    if slowest
                    else "- (slowest link only)",
                )
            )
        machine = self.hosts["machine"]
        link = self.hosts["link"]
        title = (  # read 155: one machine named once read as every row's, on one core
            f"all-reduce and training: loopback here ({cores_phrase()}), two network "
            f"namespaces in the committed run · that run's machine: {machine['processor']}, "
            f"{machine['cpu_cores']} cores, TensorFlow {machine['tensorflow']}, {machine['date']}"
        )
        notes = [
            f"the two-host rows are a committed `make hosts` run (not this run): one veth "
            f"pair shaped by tbf on both ends (burst {format_bytes(link['burst_bytes'])}), MTU "
            f"{link['mtu']}; tbf counts whole frames, of which TCP payload is at most "
            f"{link['payload_share']:.1%} (expected, not measured: a full frame less IPv4's 20 "
            "and TCP's 32 header bytes, timestamps on as Linux's default, over the frame with "
            "its 14-byte Ethernet header, which Linux's qdiscs count in a packet's length)",
            "below the break-even size an all-reduce costs mostly its latency alpha, above it "
            "mostly bytes / beta; alpha and beta are fitted by least squares on relative error "
            "(each size's residual divided by its time, so the largest size does not decide "
            "alone), and alpha's band combines, over the fitted sizes, half how far the fit's "
            "alpha moves when that size's time alone moves down and up by its noise, as the "
            "root of their sum of squares (the sizes are timed apart; `costs.fit_noise_s`; "
            "plain least squares would give another band): a band that reaches 0 leaves "
            "alpha, and the break-even size, undetermined",
        ]
        band = self.hosts.get("fixed_band")  # recorded since make hosts has kept it
        if any(found.get("why") for found in self.hosts["allreduce"]):
            notes.append(
                f"the committed run's readings below hold beta against a fixed band"
                f"{f' (±{band:.0%}, the goal make hosts checks)' if band else ''}, not against "
                "noise: that run kept none for beta, so they are its readings, not this run's"
            )
        for found in self.hosts["allreduce"]:  # why the check holds or not, from the measurements
            rate = f"{found['rate_bit_s'] / 1e6:.0f} Mbit/s"
            notes += [f"{rate}: {why}" for why in found.get("why", [])]
            if found.get("why") and "tcp_over_rate" in found:  # read 94: its rate, and the label
                notes.append(f"{rate}: {_against_raw_tcp(found, band)}")
        failures = [
            (name, found["verdict"], _survivors_error(found.get("errors", [])))
            for name, found in self.hosts.get("failure", {}).items()
        ]
        tables = [Table(title, columns, rows, notes)]
        if failures:
            columns = ("case", "what happened", "the error the other workers got")
            tables.append(Table("the failure demo across the two hosts", columns, failures))
        copy = self.hosts.get("compute_copy", {})
        if "hidden_fraction" in copy:
            ceiling = copy.get("hidden_ceiling")
            rows = [
                ("run (in the other namespace)", format_seconds(copy["run_s"])),
                ("copy (across the slow link)", format_seconds(copy["copy_s"])),
                ("overlapped", format_seconds(copy["overlapped_s"])),
                ("hidden by overlap", f"{copy['hidden_fraction']:.0%}"),
            ]
            # The committed run's own verdict says whether its saving stood out of its noise:
            # only "Overlapped ran faster ..." is a measured saving; anything else is not one.
            inside = not copy.get("verdict", "").startswith("Overlapped ran faster")
            if inside:
                rows[-1] = (rows[-1][0], f"{rows[-1][1]} (not a result: see the verdict below)")
            if ceiling is not None:  # read 115: its launch and ideal printed, so it rebuilds
                shorter = min(copy["run_s"], copy["copy_s"])
                launch = (1 - ceiling) * shorter
                ideal = copy["run_s"] + copy["copy_s"] - launch
                rows.append(
                    (
                        "hidden by overlap, at most (one launch paid)",
                        f"{ceiling:.1%} = 1 - launch / min(run, copy), the committed run's launch "
                        f"{format_seconds(launch)}; run + copy - launch = {format_seconds(ideal)}, "
                        "which the share is of (the verdict's 'one after the other' is that run's "
                        "measured forced order, another time)",
                    )
                )
            if "verdict" in copy:  # whether that share stood out of the run's noise
                rows.append(("notebook 02's verdict on that run", copy["verdict"]))
            note = (
                "hypothesis, not measured: across the link the copy waits on the link rather than "
                "on the cores the matmuls use, as a GPU's copy engine runs beside its compute"
                + (
                    "; even so, the committed make hosts run could not measure a saving from "
                    "overlap"
                    if inside
                    else "; the committed make hosts run measured the saving above (notebook 02's "
                    "experiment, run across the link)"
                )
            )
            tables.append(
                Table(
                    "notebook 02's compute and copy across the slow link (committed run)",
                    ("quantity", "value"),
                    rows,
                    [note],
                )
            )
        return tables


def _training_words(
    training: dict, link: dict, burst_bytes: int | None = None, payload_share: float | None = None
) -> str:
    """The two-host training's verdict, and its 2-worker step beside the cost model's, with the
    alpha and beta that model used: `make hosts` fits them on every size of the slowest `link`
    (the row's own are fitted without the held-out sizes), so that the model rebuilds. Where the
    gradients are within twice the limiter's burst (`burst_bytes`), a hypothesis for a step
    faster than beta allows is named (read 107)."""
    measured, predicted = training["step_s"][-1], training["predicted_s"][-1]
    gap = measured / predicted - 1
    used = ""
    if "worker_medians_s" in link and "gradient_bytes" in training:  # older files kept neither
        slowest = [max(t) for t in zip(*link["worker_medians_s"], strict=True)]
        fit = fit_alpha_beta(link["sizes"], slowest)
        used = (
            f"one worker's step {format_seconds(training['step_s'][0])} + the ring's all-reduce "
            f"of {format_bytes(training['gradient_bytes'])} from alpha "
            f"{format_seconds(fit.alpha_s)} and beta {format_rate(fit.beta_bytes_per_s, 'B/s')}, "
            f"fitted on all {len(link['sizes'])} sizes; "
        )
    alone = predicted - training["step_s"][0]  # the model's all-reduce, without the compute
    # read 156: a step shorter than the model's all-reduce alone says what it implies; read
    # 158: only past the 5% floor (that run kept no spread: 5.76 ms beside 5.80 ms is nothing)
    shorter = (
        f"; the whole step is shorter than the model's all-reduce alone "
        f"({format_seconds(alone)}) by more than the {NOISE_FLOOR:.0%} floor every reading here "
        "gets, so its gradients crossed faster than the fitted beta says"
        if measured < alone * (1 - NOISE_FLOOR)
        else ""
    )
    above = _above_link(training, link, payload_share) if payload_share else ""
    return (
        f"{training['two_vs_one']} (the committed run's verdict, from step times whose spread "
        f"it did not keep: not checkable here); a step took {format_seconds(measured)}, the "
        f"model says {format_seconds(predicted)} ({used}{gap:+.0%}: the committed "
        "run kept no spread for its steps, so this gap is not read as the model holding or "
        f"missing{shorter}{above}{_burst_words(training, burst_bytes)})"
    )


def _above_link(training: dict, link: dict, payload_share: float) -> str:
    """Read 168: by the model's premise (one worker's step, then the all-reduce), the time a
    step leaves for its all-reduce, as a rate for the ring's bytes, beside the link's payload
    rate: above it by more than the floor, a rate no steady stream passes, said as such."""
    n, grads = len(training["step_s"]), training.get("gradient_bytes")
    left = training["step_s"][-1] - training["step_s"][0]
    if n < 2 or not grads or left <= 0:
        return ""
    payload = link["rate_bit_s"] / 8 * payload_share
    # the least time the ring's bytes take at that rate, over the time the step left them
    ratio = bus_bandwidth_bound_s(n, grads, payload) / left
    rate = ratio * payload
    if ratio <= 1 + NOISE_FLOOR:
        return ""
    return (
        f"; by the model's premise (one worker's step, then the all-reduce) the step leaves "
        f"{format_seconds(left)} for its all-reduce: {format_rate(rate, 'B/s')} for the ring's "
        f"bytes, {ratio:.2f}x the link's payload rate ({format_rate(payload, 'B/s')}), "
        f"above it by more than the {NOISE_FLOOR:.0%} floor: a rate no steady stream passes, "
        "so either the premise or the rate is not a result here"
    )


def _burst_words(training: dict, burst_bytes: int | None) -> str:
    """The limiter's burst beside gradients of about its size: tbf lets a burst through without
    waiting for tokens (read 135: stated bare as 'at the line's own speed'), so one step's
    all-reduce may beat beta (a hypothesis, not measured)."""
    grads = training.get("gradient_bytes")
    if not burst_bytes or not grads or grads > 2 * burst_bytes:
        return ""
    return (
        f"; the limiter's token bucket holds a burst of {format_bytes(burst_bytes)}, which it "
        "lets through without waiting for tokens (tc-tbf's documentation; not measured here), "
        f"and the gradients, {format_bytes(grads)}, are within twice that, so one step's "
        "all-reduce may pass faster than beta says (a hypothesis, not measured)"
    )


def break_even_bytes(alpha_s: float, beta_bytes_per_s: float) -> float:
    """The message size whose transfer time S / beta equals the latency alpha."""
    return alpha_s * beta_bytes_per_s


def _committed_alpha_band_s(found: dict) -> float | None:
    """alpha's band for a committed link: the sizes it was fitted on (those not held out), each
    time moved by its recorded noise; None for a file that kept no per-size noise."""
    if "noise" not in found or "times_s" not in found:
        return None
    held = {h["bytes"] for h in found["held_out"]}
    fitted = [
        (s, t, r * t)
        for s, t, r in zip(found["sizes"], found["times_s"], found["noise"], strict=True)
        if s not in held
    ]
    sizes, times, noises = zip(*fitted, strict=True)
    return fit_prediction_noise_s(sizes, times, noises, at=0)  # the prediction at 0 is alpha


def _resolved(alpha_s: float, band_s: float | None) -> bool:
    return alpha_s > 0 and (band_s is None or band_s < alpha_s)


def _break_even(alpha_s: float, beta_bytes_per_s: float, band_s: float | None) -> str:
    """alpha x beta, with the range alpha's band gives it; '-' when alpha is not resolved."""
    if not _resolved(alpha_s, band_s):
        return "- (alpha not resolved)"
    found = _size(break_even_bytes(alpha_s, beta_bytes_per_s))
    if band_s is None or math.isinf(beta_bytes_per_s):
        return found
    low, high = (
        break_even_bytes(a, beta_bytes_per_s) for a in (alpha_s - band_s, alpha_s + band_s)
    )
    return f"{found} ({_size(low)} to {_size(high)})"


def _size(nbytes: float) -> str:
    return "unbounded" if math.isinf(nbytes) else format_bytes(nbytes)


def load_hosts(path: Path = HOSTS_FILE) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def hosts_reference(
    job: AllReduceJobResult, sweep: TrainingSweepResult | None = None, path: Path = HOSTS_FILE
) -> HostsReferenceResult:
    """This run's loopback numbers beside the committed `make hosts` run (if there is one)."""
    return HostsReferenceResult(job, sweep, load_hosts(path))


def _noises(held: dict) -> str:
    """' (±34%)', or ' (±15%, ±6%)' with the fit's: the bands a residual is read against."""
    bands = [f"±{held[k]:.0%}" for k in ("noise", "fit_noise") if k in held]
    return f" ({', '.join(bands)})" if bands else ""


def _survivors_error(errors: list[str]) -> str:
    """The first error a worker that was not killed reported, as TensorFlow named it: its class
    and the start of its message ('UnavailableError: ... Connection reset')."""
    for error in errors:
        if "killed by" in error:
            continue
        found = re.search(r"(\w+Error): (.*)", error)
        if found:
            message = found.group(2).split(" [")[0].split("\n")[0]
            if message.startswith("tensorflow."):  # only the class again, by its full name
                return found.group(1)
            return f"{found.group(1)}: {message[:90]}" + ("..." if len(message) > 90 else "")
    return "none: the others finished"


def _against_raw_tcp(found: dict, band: float | None) -> str:
    """Raw TCP's rate through the limiter, and what is left of TensorFlow's gap past it: read
    96, 'the rest of TensorFlow's gap' printed where its beta was 1.01x raw TCP's."""
    tcp = found["tcp_over_rate"] * found["rate_bit_s"] / 8
    said = (
        f"raw TCP (one socket stream) reached {tcp / 1e6:.1f} MB/s through the same limiter "
        f"({found['tcp_over_rate']:.2f} of the set rate)"
    )
    if any("raw TCP" in why for why in found["why"]):  # the run's own reading says the rest
        return said
    ratio, band = found["beta_bytes_per_s"] / tcp, band or 0.0
    if ratio >= 1 - band:
        return (
            f"{said}; TensorFlow's fitted beta is {ratio:.2f} of it, within the fixed "
            f"±{band:.0%}: no gap past raw TCP to explain at this rate"
        )
    return (
        f"{said}; TensorFlow's fitted beta is {ratio:.2f} of it, below by more than the fixed "
        f"±{band:.0%}: that the rest is TensorFlow's path on that run's cores is a hypothesis (not "
        "traced; the committed run read its serial model only where its own check missed)"
    )
