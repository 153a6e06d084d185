"""An all-reduce carried out as messages: each rank's vector checked, cut into chunks, every
message recorded, and what the messages cost counted from them.

The schedules that use this (the seed's, the ring, the tree) are notebook 05's own code, saved
into `collectives/schedules.py`; their counted costs equal the closed forms in `algorithms.py`.
"""

from __future__ import annotations

import dataclasses
import functools

from d2lhelpers.collectives.algorithms import AllreduceCosts
from d2lhelpers.collectives.step_plots import plot_allreduce_steps
from d2lhelpers.core.checks import require_count
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import BYTES_PER_FLOAT


def rank_vectors(vectors, root: int | None = None) -> list[list]:
    """Copies of the per-rank vectors (the caller's are never changed); refuse no ranks, empty
    or unequal vectors, and a `root` that is not one of the ranks."""
    data = [list(v) for v in vectors]
    if not data:
        raise ValueError("need at least one rank (n >= 1), got no vectors")
    if any(len(v) == 0 for v in data):
        raise ValueError("every rank needs a non-empty vector")
    lengths = {len(v) for v in data}
    if len(lengths) > 1:
        raise ValueError(f"all ranks need vectors of one length, got lengths {sorted(lengths)}")
    if root is not None:
        require_count("root (a rank)", root, 0, len(data) - 1)
    return data


def chunk_bounds(length: int, n: int) -> list[tuple[int, int]]:
    """(start, stop) of n chunks covering `length` elements; the first length % n get one more."""
    length = require_count("length", length, 0)
    n = require_count("n (chunks)", n, 1)
    size, extra = divmod(length, n)
    return [(c * size + min(c, extra), (c + 1) * size + min(c + 1, extra)) for c in range(n)]


@dataclasses.dataclass(frozen=True)
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


@dataclasses.dataclass(frozen=True, repr=False)  # shown by its table (`Reported`)
class AllreduceStepsResult(Reported):
    """An all-reduce carried out: each rank's final vector, every message, and their costs."""

    algorithm: str
    vectors: list[list]  # each rank's vector at the end
    transfers: tuple[Transfer, ...]
    element_bytes: int = BYTES_PER_FLOAT

    @functools.cached_property
    def costs(self) -> AllreduceCosts:
        """Rounds, messages and bytes, counted from the recorded messages."""
        link, rank, largest = {}, {}, {}
        for t in self.transfers:
            nbytes = t.n_elements * self.element_bytes
            link[t.sender, t.receiver] = link.get((t.sender, t.receiver), 0) + nbytes
            rank[t.sender] = rank.get(t.sender, 0) + nbytes
            largest[t.step] = max(largest.get(t.step, 0), nbytes)
        return AllreduceCosts(
            algorithm=self.algorithm,
            n_ranks=len(self.vectors),
            n_elements=len(self.vectors[0]),
            element_bytes=self.element_bytes,
            rounds=len(largest),
            messages=len(self.transfers),
            bytes_per_link=max(link.values(), default=0),
            bytes_per_rank=max(rank.values(), default=0),
            sequential_bytes=sum(largest.values()),
        )

    def plot(self, columns: int = 4):
        """One panel per round: ranks as circles, an arrow per message (`plot_allreduce_steps`)."""
        return plot_allreduce_steps(self, columns)

    def tables(self) -> list[Table]:
        """One row per round: who sent which chunk to whom."""
        c = self.costs
        whole = self.algorithm != "ring"  # the tree and the seed send whole vectors
        rows = []
        for step in sorted({t.step for t in self.transfers}):
            sent = [t for t in self.transfers if t.step == step]
            messages = ", ".join(
                f"{t.sender}→{t.receiver}" + ("" if whole else f" c{t.chunk}") for t in sent
            )
            rows.append((step + 1, sent[0].phase, messages))
        title = (
            f"{self.algorithm} all-reduce on {c.n_ranks} ranks: {c.rounds} rounds, "
            f"{c.messages} messages"
        )
        what = "sender→receiver" + (", whole vectors" if whole else " chunk")
        note = (
            f"bytes through the busiest link {c.bytes_per_link}, sent by the busiest rank "
            f"{c.bytes_per_rank}, one round after another {c.sequential_bytes} "
            f"({c.n_elements} elements of {c.element_bytes} bytes per rank)"
        )
        return [Table(title, ("round", "phase", what), rows, [note])]
