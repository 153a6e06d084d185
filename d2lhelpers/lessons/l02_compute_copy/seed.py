"""The seed's compute-and-copy numbers, read carefully: what its own timings allow us to infer.

The seed (a TensorFlow version of d2l's "Automatic Parallelism") times 50 products of 4000²
float32 on "GPU1", then copies all 50 to the CPU, then does both in one timed block:

    'Run on GPU1'                  run(x) then y[-1].numpy()         0.0557 s
    'Copy to CPU'                  50 eager tf.identity to /CPU:0    2.1474 s
    'Run on GPU1 and copy to CPU'  both, then a CPU tensor's numpy   2.5692 s

'Run on GPU1' ends with `.numpy()` of one 4000² float32 result: a 64 MB device-to-host copy,
which at the seed's own copy rate (50 results in 2.1474 s = 1.49 GB/s) costs about 43 ms, most
of the 55.7 ms. It is taken off before any rate is inferred. The seed names neither its GPU nor
its link; TensorFlow runs float32 matmuls as TF32 on NVIDIA Ampere and newer GPUs by default.
"""

from __future__ import annotations

from d2lhelpers.core.counts import chain_flops
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import GB, format_seconds
from d2lhelpers.core.verdicts import numbered
from d2lhelpers.references import (
    DATASHEET_PEAK,
    H100_TF32_PEAK,
    HIGHEST_BEFORE_BLACKWELL,
    SEED_000,
    SEED_000_MATMULS,
    SEED_000_SIZE,
    SEED_SPREAD,
    SEED_SPREAD_SOURCE,
    above_datasheet,
    h200_rows,
    h200_run_words,
    less_copy_source,
    seed_compute_s,
    seed_copy_rate,
    seed_final_copy_s,
    spread_less_copy,
    within_seed_noise,
)

SEED_RUN_S = SEED_000["Run on GPU1"]
SEED_COPY_S = SEED_000["Copy to CPU"]
SEED_BOTH_S = SEED_000["Run on GPU1 and copy to CPU"]
PCIE4_X16_PRACTICAL = 25e9  # what a PCIe 4.0 x16 link carries in practice (32 GB/s raw), B/s
CAUSES_OF_A_TOO_HIGH_RATE = (
    "the 50 identical products were merged and fewer ran (notebook 01 measures this happening)",
    "the single result's .numpy() copy was faster than the seed's bulk copy rate, so less than "
    "43 ms should be taken off",
)


class SeedReadingResult(Reported):
    """The seed's three timings, with the `.numpy()` copy inside 'Run on GPU1' taken off."""

    copy_rate = seed_copy_rate()
    numpy_copy_s = seed_final_copy_s()
    run_s = seed_compute_s("Run on GPU1")  # the matmuls alone, if the copy ran at the bulk rate
    matmul_rate = chain_flops(SEED_000_SIZE, SEED_000_MATMULS) / run_s
    ideal_sequential_s = run_s + SEED_COPY_S
    ideal_overlapped_s = max(run_s, SEED_COPY_S)

    def __init__(self, h200: dict[str, dict] | None = None):
        self.h200 = h200_rows() if h200 is None else h200

    @property
    def verdict(self) -> str:
        extra = SEED_BOTH_S - self.ideal_sequential_s
        ratio = SEED_BOTH_S / self.ideal_sequential_s
        band = f"the {SEED_SPREAD:.0%} that stands in for the seed's noise ({SEED_SPREAD_SOURCE})"
        if abs(ratio - 1) <= SEED_SPREAD:  # read 97: 1.19x read as 'longer' inside the 20%
            how = f"{format_seconds(abs(extra))} {'more' if extra > 0 else 'less'}, within {band}"
            how += ": no faster than one after the other, so no overlap shows"
        elif extra > 0:
            how = f"{format_seconds(extra)} more, beyond {band}: slower than one after the other"
        else:
            how = f"{format_seconds(-extra)} less, beyond {band}"
        most = min(self.run_s, SEED_COPY_S)  # no overlap can hide more than the shorter part
        whole = min(SEED_RUN_S, SEED_COPY_S)  # the run if its .numpy() copy took no time at all
        return (
            f"The seed's 'run and copy' took {ratio:.2f}x run + copy ({how}). Any overlap could "
            "have hidden at most the run's "
            f"{format_seconds(most)} (if its .numpy() copy ran at the seed's copy rate, an "
            f"assumption; {format_seconds(whole)}, the whole 'Run on GPU1', if it took no time), "
            f"{most / SEED_BOTH_S:.1%} to {whole / SEED_BOTH_S:.1%} of its {SEED_BOTH_S} s, so "
            "these numbers cannot tell whether its copies overlapped the run at all."
        )

    def tables(self) -> list[Table]:
        rows = [
            ["'Copy to CPU'", f"{SEED_COPY_S} s", "50 results of 4000² float32 (3.2 GB)"],
            ["copy rate", f"{self.copy_rate / GB:.2f} GB/s", "3.2 GB / 2.1474 s"],
            [
                "'Run on GPU1'",
                f"{SEED_RUN_S} s",
                "includes y[-1].numpy(): one 64 MB result copied to the host",
            ],
            [
                "that .numpy() copy",
                format_seconds(self.numpy_copy_s),
                "64 MB at the seed's own copy rate",
            ],
            ["run without it", format_seconds(self.run_s), "0.0557 s minus the copy"],
            [
                "ideal one after the other",
                f"{self.ideal_sequential_s:.4f} s",
                "run without the copy + 'Copy to CPU'",
            ],
            ["ideal overlapped", f"{self.ideal_overlapped_s:.4f} s", "max(run, copy)"],
            [
                "'Run on GPU1 and copy to CPU'",
                f"{SEED_BOTH_S} s",
                f"{SEED_BOTH_S / self.ideal_sequential_s:.2f}x one after the other, "
                f"{SEED_BOTH_S / self.ideal_overlapped_s:.2f}x overlapped",
            ],
        ]
        verdicts = [
            self.verdict,
            "Unknown: the seed names neither its GPU nor its link. If the link were PCIe 4.0 x16 "
            f"(about {PCIE4_X16_PRACTICAL / GB:.0f} GB/s in practice: an assumed figure, of its "
            "32 GB/s raw, not measured here), "
            f"{self.copy_rate / GB:.2f} GB/s would be {self.copy_rate / PCIE4_X16_PRACTICAL:.0%} "
            "of it; why it is so slow (e.g. pageable host memory, one tensor per call) is a "
            "hypothesis the seed does not test.",
            "TensorFlow runs float32 matmuls as TF32 on NVIDIA Ampere and newer GPUs by default "
            "(tf.config.experimental.enable_tensor_float_32_execution, per TensorFlow's "
            "documentation; no GPU here to check it), so a rate from the seed's GPU would be a "
            "TF32 rate if that GPU is an Ampere or newer (the seed does not say), a float32 one "
            "if older.",
        ]
        verdicts += h200_run_words(self.h200, self.copy_rate, self.matmul_rate)
        flags = []
        spread = spread_less_copy(self.copy_rate)  # read 129: the stand-in on the rate's basis
        where = above_datasheet(self.matmul_rate, spread)
        if where == "within":  # read 83: 1.01x the peak, inside the seed's noise stand-in
            verdicts.append(
                f"50 products of 4000² in {format_seconds(self.run_s)} would be "
                f"{self.matmul_rate / 1e12:.0f} TFLOP/s against {DATASHEET_PEAK}, "
                f"{HIGHEST_BEFORE_BLACKWELL}: "
                + within_seed_noise(self.matmul_rate, spread, less_copy_source(self.copy_rate))
            )
        elif where == "beyond":
            causes = numbered(CAUSES_OF_A_TOO_HIGH_RATE)
            flags.append(
                f"50 products of 4000² in {format_seconds(self.run_s)} would be "
                f"{self.matmul_rate / 1e12:.0f} TFLOP/s, {self.matmul_rate / H100_TF32_PEAK:.2f}x "
                f"{DATASHEET_PEAK}, {HIGHEST_BEFORE_BLACKWELL}; the seed names no GPU, but on any "
                "earlier NVIDIA GPU this rate is "
                f"above its datasheet's peak, beyond the {spread:.0%} that stands in for the "
                f"seed's noise ({less_copy_source(self.copy_rate)}). Possible causes, "
                f"not measured here: {causes}"
            )
        columns = ["timing", "value", "what"]
        return [Table("The seed's numbers, read carefully", columns, rows, verdicts, flags)]


def seed_reading() -> SeedReadingResult:
    """The seed's compute-and-copy timings and what they allow us to infer (no measurement here;
    the committed H200 run, when there, for scale)."""
    return SeedReadingResult()
