"""How much memory one MWMS worker process of notebook 06 needs: the model `require_memory` admits.

Measured (TF 2.21, 2 CPU cores, 1 op thread per worker): a worker peaks at ~0.75-0.8 GiB RSS
(~0.4 GiB PSS: TF's shared libraries are counted again in every RSS) and grows by ~7x the
largest message during a ring all-reduce over gRPC.
"""

from __future__ import annotations

from d2lhelpers.core.units import BYTES_PER_FLOAT, MiB
from d2lhelpers.processes.mwms import DATA_BATCHES, FEATURES

WORKER_BYTES = 800 * MiB  # one idle TensorFlow worker's peak RSS (measured ~0.75 GiB)
RING_COPIES = 8  # a ring all-reduce over gRPC holds ~7x the message at its peak, plus the input
TRAINING_COPIES = 10  # weights, gradients, the ring's copies of the gradients


def parameter_count(width: int) -> int:
    """Dense(FEATURES -> width)-relu-Dense(width -> 1): weights and biases."""
    return FEATURES * width + width + width + 1


def worker_memory_bytes(message_bytes: int = 0) -> int:
    """One worker's peak memory: TensorFlow itself, plus a ring all-reduce of `message_bytes`."""
    return WORKER_BYTES + RING_COPIES * message_bytes


def training_memory_bytes(width: int, batch: int) -> int:
    """One training worker's peak memory: TensorFlow, the model's copies, data and activations."""
    model = TRAINING_COPIES * BYTES_PER_FLOAT * parameter_count(width)
    data = DATA_BATCHES * batch * (FEATURES + 1) * BYTES_PER_FLOAT
    activations = 4 * batch * width * BYTES_PER_FLOAT  # forward and backward, with slack
    return WORKER_BYTES + model + data + activations
