"""The seed's Go program `allreduce.go`, ported line for line: its output, character for character.

`tests/test_seed_port.py` holds it against the Go program's own output
(`tests/seeds/004_allreduce_go_output.txt`).
"""

from __future__ import annotations

import math
from decimal import Decimal

from d2lhelpers.collectives.costs import efficiency_table
from d2lhelpers.collectives.transfers import rank_vectors


def seed_allreduce(local: list[list[float]]) -> int:
    """The seed's Go `allReduce`: every list becomes the element-wise sum (in place); hops.

    What it really is: a *reduce* to one rank (the running sum passes 0 -> 1 -> ... -> n-1,
    n-1 hops) then a *broadcast* from that rank (n-1 more), each message the whole vector. No
    rank ever sends 1/n of it, so it is not a ring all-reduce. The Go program's goroutines
    capture the loop variable `r`; where that is one variable shared by every iteration (Go
    before 1.22), they usually run after the loop has ended with r == n, and `local[n]` panics:
    go1.19.8, the one older Go tried, printed "index out of range [4] with length 4" in 5 runs of
    5. With `r := r` added (one `r` per iteration, as Go 1.22 gives every loop), its output is
    byte for byte what `seed_program_output` returns.
    """
    n = len(rank_vectors(local))  # Go would panic on n = 0 or a short vector
    total = list(local[0])
    hops = 0
    for r in range(1, n):  # reduce phase: accumulate around the ring
        for i in range(len(total)):
            total[i] += local[r][i]
        hops += 1
    for r in range(n):  # broadcast phase: everyone receives the total
        local[r][:] = total
        hops += 1
    return hops - 1  # the last rank already holds the sum


def go_format_float(x: float) -> str:
    """A float64 as Go's fmt prints it with %v: shortest digits, exponent if < -4 or >= 6.

    Go's %v is strconv's 'g' with precision -1 (ftoa.go: "if precision was the shortest
    possible, use precision 6 for this decision"): 1111 -> 1111, 1e6 -> 1e+06, 1e-5 -> 1e-05.
    """
    x = float(x)
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "+Inf" if x > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    if x == 0:
        return sign + "0"
    # repr is Python's shortest round-trip digit string, the digits Go's shortest mode finds.
    _, digit_tuple, exponent = Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + exponent  # digits before the decimal point (Go's d.dp)
    exp = point - 1
    if exp < -4 or exp >= 6:
        tail = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{tail}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def seed_program_output() -> str:
    """What the seed's Go `main` prints, character for character (table from costs.py)."""
    gpus = [[1.0, 2.0], [10.0, 20.0], [100.0, 200.0], [1000.0, 2000.0]]
    hops = seed_allreduce(gpus)
    held = "[" + " ".join(go_format_float(v) for v in gpus[0]) + "]"
    first = f"every GPU now holds {held} after {hops} hops\n"
    return first + "\n" + str(efficiency_table())
