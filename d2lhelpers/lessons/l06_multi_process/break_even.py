"""Notebook 06's Try it: how much compute per step K workers need before they beat one.

By the model of `training.predict_step_s`, K workers beat one in samples/s when

    K t(1) > t(1) max(1, K / cores) + T_ring(K, G),  so  t(1) > T_ring / (K - max(1, K / cores)),

and never when K - max(1, K / cores) <= 0: on one core the workers share it. The answer is
computed from the learner's own run and checked against what the K-worker run measured.
"""

from __future__ import annotations

import dataclasses

from d2lhelpers.collectives.algorithms import allreduce_time_s
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import cores_phrase, format_seconds
from d2lhelpers.lessons.l06_multi_process.allreduce import AllReduceJobResult
from d2lhelpers.lessons.l06_multi_process.training import (
    TrainingSweepResult,
    scaling_outcome,
    scaling_sentence,
)


def break_even_step_s(n_workers: int, ring_s: float, cores: int) -> float | None:
    """The least one-worker compute per step for which K workers beat one in samples/s, by the
    model: K t(1) > t(1) max(1, K/cores) + T_ring, so t(1) > T_ring / (K - max(1, K/cores)).
    None when no compute is enough: K workers on one core share it, K - K/1 = 0."""
    gain = n_workers - max(1.0, n_workers / cores)
    return None if gain <= 0 else ring_s / gain


@dataclasses.dataclass
class BreakEvenResult(Reported):
    """Try it: how much compute per step two (or K) workers need before they beat one."""

    n_workers: int
    one_step_s: float  # measured: one worker's step, all compute
    ring_s: float  # the model's all-reduce of the gradients on K workers
    cores: int
    measured: str  # this run's own K-vs-one sentence
    outcome: str  # and its outcome: 'win', 'lose' or 'tie' (`scaling_outcome`)
    ring_band_s: float | None = None  # the all-reduce's band from the fit's (None: not known)
    model_gap: str | None = None  # where the sweep's model missed K workers' step: the gap

    @property
    def needed_s(self) -> float | None:
        return break_even_step_s(self.n_workers, self.ring_s, self.cores)

    @property
    def needed_range_s(self) -> tuple[float, float] | None:
        """The least compute that wins, at both ends of the all-reduce's band (None: no band,
        or no compute is enough)."""
        if self.needed_s is None or self.ring_band_s is None:
            return None
        ring = (max(0.0, self.ring_s + sign * self.ring_band_s) for sign in (-1, 1))
        low, high = (break_even_step_s(self.n_workers, r, self.cores) for r in ring)
        return low, high

    @property
    def model_says(self) -> str | None:
        """'win' or 'lose' by the model at this run's step; None when the band of the compute
        needed holds this run's step (the model cannot say)."""
        if self.needed_s is None:
            return "lose"
        found = self.needed_range_s
        if found is not None and found[0] <= self.one_step_s <= found[1]:
            return None
        return "win" if self.one_step_s > self.needed_s else "lose"

    @property
    def model_says_win(self) -> bool:
        return self.model_says == "win"

    @property
    def verdict(self) -> str:
        k = self.n_workers
        if self.needed_s is None:  # one core only (`break_even_step_s`); read 177: the premise
            return (
                f"by the model, {k} workers never beat one here: on {cores_phrase(self.cores)} "
                f"they share it, so the model has each step compute {k}x as long (its premise, "
                "not measured), and puts the all-reduce on top (it assumes no overlap of compute "
                "and communication; the sentence under the sweep's table says whether its step "
                "held)"
            )
        now = format_seconds(self.one_step_s)
        needed = format_seconds(self.needed_s)
        found = self.needed_range_s
        if found is None:
            source = (
                "a point value from the fitted alpha and beta, whose inputs' noise the sweep's "
                "table prints"
            )
        else:
            source = (
                f"{format_seconds(found[0])} to {format_seconds(found[1])} within the fit's band: "
                "each all-reduce size's time moved by its noise"
            )
        said = f"by the model, {k} workers win once one worker's step computes for more than "
        said += f"{needed} ({source})"
        if self.model_says is None:
            return (
                f"{said}: this run's {now} lies inside that range, so the model cannot say "
                f"whether {k} workers win here"
            )
        if self.model_says_win:
            return f"{said}: this run's {now} already does"
        return f"{said}: {self.needed_s / self.one_step_s:.1f}x this run's {now}"

    def tables(self) -> list[Table]:
        needed = "never" if self.needed_s is None else format_seconds(self.needed_s)
        ring = format_seconds(self.ring_s)
        if self.ring_band_s is not None:
            ring += f" ±{format_seconds(self.ring_band_s)}"
        found = self.needed_range_s
        if found is not None:
            needed += f" ({format_seconds(found[0])} to {format_seconds(found[1])})"
        rows = [
            ("one worker's step (measured)", format_seconds(self.one_step_s)),
            (f"all-reduce of the gradients, {self.n_workers} workers (model)", ring),
            ("usable CPU cores", self.cores),
            ("compute per step needed to win", needed),
        ]
        if self.outcome == "tie":
            judged = "this run cannot tell whether the model is right (inside the noise)"
        elif self.model_says is None:
            judged = (
                "the model cannot be checked here: the fit's band leaves its answer open at this "
                "run's step"
            )
        elif self.outcome == self.model_says:
            judged = f"the model agrees in direction (both: {self.outcome}); "
            if self.model_gap is None:
                judged += "how close its step time came is the sentence under the sweep's table"
            else:  # read 129: an answer from a model that missed this very step, said so
                judged += (
                    f"but its step missed the measured one ({self.model_gap}, beyond the "
                    "noise: the sentence under the sweep's table), so the compute needed above "
                    "is the model's estimate, not a threshold this run measured"
                )
        else:
            judged = "the model disagrees (see its residuals in the sweep's table)"
        check = f"check against this run: {self.measured}; {judged}"
        return [Table("when do more workers win?", ("", "value"), rows, [self.verdict, check])]


def break_even(
    sweep: TrainingSweepResult, allreduce: AllReduceJobResult | None = None, n_workers: int = 2
) -> BreakEvenResult:
    """The Try-it answer from a sweep holding 1 and `n_workers` workers and an all-reduce fit;
    with the all-reduce job that fit came from (`allreduce`, or the sweep's own), the answer
    carries the fit's band (`AllReduceJobResult.ring_time_s`)."""
    one = sweep.one
    job = next((j for j in sweep.jobs if j.n_workers == n_workers), None)
    if one is None or job is None or sweep.link is None:
        raise ValueError(f"need a sweep with 1 and {n_workers} workers and a link (its `link=`)")
    allreduce = sweep.allreduce if allreduce is None else allreduce
    if allreduce is None:
        link, band = sweep.link, None
        ring = allreduce_time_s(
            "ring", n_workers, job.gradient_bytes, link.alpha_s, link.beta_bytes_per_s
        )
    elif allreduce.n_workers < 2 or allreduce.link != sweep.link:
        raise ValueError("the sweep's link is not this all-reduce job's fit: pass the job it used")
    else:
        ring, band = allreduce.ring_time_s(n_workers, job.gradient_bytes)
    measured, outcome = scaling_sentence(job, one), scaling_outcome(job, one)
    return BreakEvenResult(
        n_workers, one.step_s, ring, sweep.cores, measured, outcome, band, sweep.model_misses(job)
    )
