"""What each all-reduce algorithm costs, in closed form: rounds, messages, bytes, alpha-beta time.

No vectors are needed: these are the counts that the schedules in `collectives/schedules.py`
(saved from notebook 05) produce when run, and the tests check that the two agree for every n
and length. Convention: in one *round* each rank sends at most one message and receives at most
one (full-duplex point-to-point links, all pairs at once). With S the vector's bytes:

    algorithm               rounds           messages   busiest link  bytes in sequence
    seed: reduce+broadcast  2(n-1)           2(n-1)     S             2(n-1) S
    ring                    2(n-1)           2n(n-1)    2(n-1)/n S    2(n-1)/n S
    tree (pairs combine)    2 ceil(log2 n)   2(n-1)     S             2 ceil(log2 n) S

alpha-beta model: time = rounds * alpha + (bytes in sequence) / beta, where "bytes in
sequence" sums, round by round, the largest message. For the ring that is the bytes each link
carries; a tree link carries S only once, but its S-byte messages follow one another.
"""

from __future__ import annotations

from dataclasses import dataclass

from d2lhelpers.collectives.costs import alpha_beta_time_s
from d2lhelpers.core.checks import require_count
from d2lhelpers.core.units import BYTES_PER_FLOAT

ALGORITHMS = ("seed", "ring", "tree")


@dataclass(frozen=True)
class AllreduceCosts:
    """What an all-reduce costs: rounds, messages, and bytes three ways (see the module doc)."""

    algorithm: str
    n_ranks: int
    n_elements: int
    element_bytes: int
    rounds: int
    messages: int
    bytes_per_link: int  # through the busiest directed link, sender -> receiver
    bytes_per_rank: int  # sent by the busiest rank (its outgoing port)
    sequential_bytes: int  # round by round, the largest message, summed

    def time_s(self, alpha_s: float, beta_bytes_per_s: float) -> float:
        """alpha-beta model: rounds * alpha + sequential_bytes / beta."""
        return alpha_beta_time_s(self.rounds, self.sequential_bytes, alpha_s, beta_bytes_per_s)


def allreduce_costs(
    algorithm: str, n_ranks: int, n_elements: int, element_bytes: int = BYTES_PER_FLOAT
) -> AllreduceCosts:
    """The closed forms of each algorithm's costs (uneven chunks included)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    n = require_count("n_ranks", n_ranks, 1)
    length = require_count("n_elements", n_elements, 1)
    element_bytes = require_count("element_bytes", element_bytes, 1)
    several = int(n > 1)  # one rank sends nothing
    if algorithm == "ring":
        small, extra = divmod(length, n)
        # A link carries every chunk but two neighbours; the busiest skips the two smallest.
        per_link = 2 * length - 2 * small - (0 < extra == n - 1)
        rounds, messages = 2 * (n - 1), 2 * n * (n - 1)
        per_rank, sequential = per_link, rounds * -(-length // n)
    elif algorithm == "tree":
        levels = (n - 1).bit_length()
        rounds, messages = 2 * levels, 2 * (n - 1)
        per_link, per_rank, sequential = several * length, levels * length, rounds * length
    else:
        rounds = messages = 2 * (n - 1)
        per_link, per_rank, sequential = several * length, (n - 1) * length, rounds * length
    return AllreduceCosts(
        algorithm=algorithm,
        n_ranks=n,
        n_elements=length,
        element_bytes=element_bytes,
        rounds=rounds,
        messages=messages,
        bytes_per_link=per_link * element_bytes,
        bytes_per_rank=per_rank * element_bytes,
        sequential_bytes=sequential * element_bytes,
    )


def allreduce_time_s(
    algorithm: str, n_ranks: int, nbytes: int, alpha_s: float, beta_bytes_per_s: float
) -> float:
    """alpha-beta prediction for an all-reduce of `nbytes` over `n_ranks` (byte-sized chunks)."""
    nbytes = require_count("nbytes", nbytes, 1)
    costs = allreduce_costs(algorithm, n_ranks, nbytes, element_bytes=1)
    return costs.time_s(alpha_s, beta_bytes_per_s)
