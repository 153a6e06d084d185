"""How much work and memory the lessons' workloads are: FLOPs and bytes, one formula each.

A matmul of (m x k) by (k x n) is 2mkn FLOPs: a multiply and an add per term. Memory counts
float32 tensors alive at once on one device.
"""

from __future__ import annotations

from d2lhelpers.core.units import BYTES_PER_FLOAT


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of one (m x k) @ (k x n) product."""
    return 2 * m * k * n


def chain_flops(size: int, n: int) -> int:
    """FLOPs of `n` size x size matmuls (a chain, or the seed's `n` identical products)."""
    return n * matmul_flops(size, size, size)


def chain_bytes(size: int) -> int:
    """Memory one chain holds at once on its device: x, the running product and the next one."""
    return 3 * size * size * BYTES_PER_FLOAT


def mlp_flops(batch: int, width: int, hidden: int) -> int:
    """FLOPs of relu(x W1 + b1) W2 + b2 on `batch` rows: its two matmuls (the rest is noise)."""
    return matmul_flops(batch, width, hidden) + matmul_flops(batch, hidden, width)


def mlp_bytes(batch: int, width: int, hidden: int) -> int:
    """Memory of the MLP's weights (W1, b1, W2, b2) and activations on `batch` rows (x, h, y)."""
    weights = 2 * width * hidden + hidden + width
    return BYTES_PER_FLOAT * (weights + batch * (2 * width + hidden))
