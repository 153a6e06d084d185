"""Collectives in pure Python: the seed's all-reduce, the five named patterns, ring and tree.

Vectors are lists of numbers, one per rank. Each all-reduce runs as a schedule of messages and
records every one (round, sender, receiver, chunk) so a notebook can draw it step by step.

Convention for every count: in one *round* each rank sends at most one message and receives at
most one (full-duplex point-to-point links, all pairs at once). With S the vector's bytes:

    algorithm               rounds           messages   busiest link  bytes in sequence
    seed: reduce+broadcast  2(n-1)           2(n-1)     S             2(n-1) S
    ring                    2(n-1)           2n(n-1)    2(n-1)/n S    2(n-1)/n S
    tree (pairs combine)    2 ceil(log2 n)   2(n-1)     S             2 ceil(log2 n) S

alpha-beta model: time = rounds * alpha + (bytes in sequence) / beta, where "bytes in
sequence" sums, round by round, the largest message. For the ring that is the bytes each link
carries; a tree link carries S only once, but its S-byte messages follow one another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from d2lhelpers.collectives.costs import (
    alpha_beta_time_s,
    efficiency_table,
    format_efficiency_table,
)
from d2lhelpers.core.checks import require_count, require_sweep
from d2lhelpers.core.units import BYTES_PER_FLOAT


def _check_vectors(vectors) -> list[list]:
    """Copies of the per-rank vectors; refuse no ranks, empty or unequal vectors."""
    data = [list(v) for v in vectors]
    if not data:
        raise ValueError("need at least one rank (n >= 1), got no vectors")
    if any(len(v) == 0 for v in data):
        raise ValueError("every rank needs a non-empty vector")
    lengths = {len(v) for v in data}
    if len(lengths) > 1:
        raise ValueError(f"all ranks need vectors of one length, got lengths {sorted(lengths)}")
    return data


def _elementwise_sum(data: list[list]) -> list:
    total = list(data[0])
    for vector in data[1:]:
        total = [a + b for a, b in zip(total, vector, strict=True)]
    return total


# --- The seed's program, ported line for line -------------------------------------------------


def seed_allreduce(local: list[list[float]]) -> int:
    """The seed's Go `allReduce`: every list becomes the element-wise sum (in place); hops.

    What it really is: a *reduce* to one rank (the running sum passes 0 -> 1 -> ... -> n-1,
    n-1 hops) then a *broadcast* from that rank (n-1 more), each message the whole vector. No
    rank ever sends 1/n of it, so it is not a ring all-reduce. Read seeds critically: on Go
    < 1.22 this Go program itself is broken. Its goroutines capture the loop variable `r`, then
    one shared variable, and usually run after the loop ends with r == n: `local[n]` panics
    (go1.19.8: "index out of range [4] with length 4" in 5 runs of 5). With `r := r` added, its
    output is byte for byte what `seed_program_output` returns.
    """
    n = len(_check_vectors(local))  # Go would panic on n = 0 or a short vector
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
    return first + "\n" + format_efficiency_table(efficiency_table())


# --- The five collectives ------------------------------------------------------------------------


def chunk_bounds(length: int, n: int) -> list[tuple[int, int]]:
    """(start, stop) of n chunks covering `length` elements; the first length % n get one more."""
    length = require_count("length", length, 0)
    n = require_count("n (chunks)", n, 1)
    size, extra = divmod(length, n)
    return [(c * size + min(c, extra), (c + 1) * size + min(c + 1, extra)) for c in range(n)]


def broadcast(vectors, root: int = 0) -> list[list]:
    """[a] [.] [.] [.]  ->  [a] [a] [a] [a]: the root's vector copied to every rank."""
    data = _check_vectors(vectors)
    _check_root(root, len(data))
    return [list(data[root]) for _ in data]


def reduce(vectors, root: int = 0) -> list[list]:
    """[a] [b] [c] [d]  ->  [a+b+c+d] [b] [c] [d]: the root alone gets the element-wise sum."""
    data = _check_vectors(vectors)
    _check_root(root, len(data))
    data[root] = _elementwise_sum(data)
    return data


def all_gather(pieces) -> list[list]:
    """[a] [b] [c] [d]  ->  [abcd] [abcd] [abcd] [abcd]: every rank gets all pieces, in order.

    Pieces may differ in length (uneven chunks are what a ring all-gather moves).
    """
    data = [list(p) for p in pieces]
    if not data:
        raise ValueError("need at least one rank (n >= 1), got no pieces")
    whole = [x for piece in data for x in piece]
    return [list(whole) for _ in data]


def reduce_scatter(vectors) -> list[list]:
    """[a0 a1 a2] [b0 b1 b2] [c0 c1 c2]  ->  [a0+b0+c0] [a1+b1+c1] [a2+b2+c2]: chunk r to rank r."""
    data = _check_vectors(vectors)
    total = _elementwise_sum(data)
    return [total[start:stop] for start, stop in chunk_bounds(len(total), len(data))]


def allreduce(vectors) -> list[list]:
    """[a] [b] [c] [d]  ->  [a+b+c+d] x 4: every rank gets the sum; reduce-scatter + all-gather."""
    return all_gather(reduce_scatter(vectors))


def _check_root(root: int, n: int) -> None:
    require_count("root (a rank)", root, 0, n - 1)


# --- All-reduce as schedules: every message recorded ----------------------------------------------


@dataclass(frozen=True)
class Transfer:
    """One message: in round `step`, `sender` passes chunk `chunk` (n_elements) to `receiver`.

    Phases "reduce-scatter" and "reduce" add the chunk into the receiver's; "all-gather" and
    "broadcast" overwrite it. The tree and the seed send the whole vector: chunk 0.
    """

    step: int
    phase: str
    sender: int
    receiver: int
    chunk: int
    n_elements: int


@dataclass(frozen=True)
class CollectiveStats:
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


@dataclass(frozen=True)
class AllreduceRun:
    """An all-reduce carried out: each rank's final vector, every message, and the costs."""

    algorithm: str
    result: list[list]
    transfers: tuple[Transfer, ...]
    stats: CollectiveStats


def _run(algorithm, result, transfers, n_elements, element_bytes) -> AllreduceRun:
    link, rank, largest = {}, {}, {}
    for t in transfers:
        nbytes = t.n_elements * element_bytes
        link[t.sender, t.receiver] = link.get((t.sender, t.receiver), 0) + nbytes
        rank[t.sender] = rank.get(t.sender, 0) + nbytes
        largest[t.step] = max(largest.get(t.step, 0), nbytes)
    stats = CollectiveStats(
        algorithm=algorithm,
        n_ranks=len(result),
        n_elements=n_elements,
        element_bytes=element_bytes,
        rounds=len(largest),
        messages=len(transfers),
        bytes_per_link=max(link.values(), default=0),
        bytes_per_rank=max(rank.values(), default=0),
        sequential_bytes=sum(largest.values()),
    )
    return AllreduceRun(algorithm, result, tuple(transfers), stats)


def _apply(data, t: Transfer, start: int, payload: list) -> None:
    stop = start + len(payload)
    if t.phase in ("reduce-scatter", "reduce"):
        mine = data[t.receiver][start:stop]
        payload = [a + b for a, b in zip(mine, payload, strict=True)]
    data[t.receiver][start:stop] = payload


def ring_allreduce(vectors, element_bytes: int = BYTES_PER_FLOAT) -> AllreduceRun:
    """Ring all-reduce: reduce-scatter then all-gather, 2(n-1) rounds, n messages each.

    The vector is cut into n chunks (uneven when n does not divide its length). Rank r always
    sends to r+1. Reduce-scatter, round s: rank r sends chunk (r - s) mod n, which r+1 adds to
    its own; after n-1 rounds rank r holds chunk r+1 summed over all ranks. All-gather, round s:
    rank r passes on chunk (r + 1 - s) mod n, which r+1 stores. Each rank sends 2(n-1) chunks:
    2(n-1)/n of the vector, whatever n is.
    """
    data = _check_vectors(vectors)
    n, length = len(data), len(data[0])
    bounds = chunk_bounds(length, n)
    transfers = []
    for step in range(2 * (n - 1)):
        reducing = step < n - 1
        phase = "reduce-scatter" if reducing else "all-gather"
        sends = []
        for rank in range(n):
            chunk = (rank - step) % n if reducing else (rank + 1 - (step - n + 1)) % n
            start, stop = bounds[chunk]
            t = Transfer(step, phase, rank, (rank + 1) % n, chunk, stop - start)
            sends.append((t, start, data[rank][start:stop]))  # all send before any receives
        for t, start, payload in sends:
            _apply(data, t, start, payload)
            transfers.append(t)
    return _run("ring", data, transfers, length, element_bytes)


def tree_allreduce(vectors, element_bytes: int = BYTES_PER_FLOAT) -> AllreduceRun:
    """Tree all-reduce: pairs combine in parallel, then the sum fans back out.

    Up, round k = 0, 1, ...: rank r + 2^k sends its vector to rank r (r a multiple of 2^(k+1)),
    which adds it: after ceil(log2 n) rounds rank 0 holds the sum. Down, the same pairs in
    reverse order: the lower rank copies the sum to the upper. 2 ceil(log2 n) rounds, 2(n-1)
    messages, each the whole vector.
    """
    data = _check_vectors(vectors)
    n, length = len(data), len(data[0])
    levels = (n - 1).bit_length()  # ceil(log2 n)
    transfers = []
    schedule = [("reduce", k) for k in range(levels)]
    schedule += [("broadcast", k) for k in reversed(range(levels))]
    for step, (phase, k) in enumerate(schedule):
        stride = 1 << k
        for low in range(0, n - stride, 2 * stride):
            high = low + stride
            sender, receiver = (high, low) if phase == "reduce" else (low, high)
            t = Transfer(step, phase, sender, receiver, 0, length)
            _apply(data, t, 0, list(data[sender]))
            transfers.append(t)
    return _run("tree", data, transfers, length, element_bytes)


def reduce_then_broadcast(vectors, element_bytes: int = BYTES_PER_FLOAT) -> AllreduceRun:
    """The seed's algorithm as a schedule: a chain reduce to rank n-1, then its broadcast.

    Round s < n-1: rank s sends the running sum to s+1, which adds its own. Then rank n-1 sends
    the sum to ranks 0, 1, ..., n-2, one per round (one port sends one message at a time):
    2(n-1) rounds and messages, like the seed's hop count, each the whole vector.
    """
    data = _check_vectors(vectors)
    n, length = len(data), len(data[0])
    transfers = [Transfer(s, "reduce", s, s + 1, 0, length) for s in range(n - 1)]
    transfers += [Transfer(n - 1 + r, "broadcast", n - 1, r, 0, length) for r in range(n - 1)]
    for t in transfers:
        _apply(data, t, 0, list(data[t.sender]))
    return _run("seed", data, transfers, length, element_bytes)


ALLREDUCE = {"seed": reduce_then_broadcast, "ring": ring_allreduce, "tree": tree_allreduce}
ALGORITHMS = tuple(ALLREDUCE)


def allreduce_stats(
    algorithm: str, n_ranks: int, n_elements: int, element_bytes: int = BYTES_PER_FLOAT
) -> CollectiveStats:
    """The closed forms of each algorithm's costs, no vectors needed (uneven chunks included)."""
    if algorithm not in ALLREDUCE:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    n_ranks = require_count("n_ranks", n_ranks, 1)
    n_elements = require_count("n_elements", n_elements, 1)
    element_bytes = require_count("element_bytes", element_bytes, 1)
    n, length, several = n_ranks, n_elements, int(n_ranks > 1)
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
    return CollectiveStats(
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
    stats = allreduce_stats(algorithm, n_ranks, nbytes, element_bytes=1)
    return stats.time_s(alpha_s, beta_bytes_per_s)


def rounds_table(ns=range(2, 65)) -> list[tuple[int, int, int, int]]:
    """(n, ring, tree, seed) rounds, by the module's convention (one send per rank per round).

    Ring 2(n-1); tree 2 ceil(log2 n): ceil(log2 n) up, as many down; the seed's reduce then
    broadcast 2(n-1). For 8 GPUs: ring 14, tree 6 (3 up + 3 down), seed 14.
    """
    ns = require_sweep("ns", ns, 1)
    return [(n, *(allreduce_stats(a, n, 1).rounds for a in ("ring", "tree", "seed"))) for n in ns]


def format_rounds_table(rows) -> str:
    """The rounds table as fixed-width text (deterministic: notebooks check it)."""
    lines = ["GPUs  ring  tree  seed"]
    lines += [f"{n:4d}  {ring:4d}  {tree:4d}  {seed:4d}" for n, ring, tree, seed in rows]
    return "\n".join(lines) + "\n"
