"""core.counts: FLOPs and bytes, checked against hand-worked numbers."""

from d2lhelpers.core import counts


def test_matmul_and_chain_flops():
    assert counts.matmul_flops(2, 3, 4) == 48  # 2 * 3 terms per entry, 8 entries
    assert counts.chain_flops(4000, 50) == 50 * 2 * 4000**3 == 6_400_000_000_000
    assert counts.chain_bytes(1024) == 3 * 1024 * 1024 * 4


def test_mlp_counts():
    # x (8x16) @ W1 (16x64): 2*8*16*64 = 16384; h (8x64) @ W2 (64x16): 16384
    assert counts.mlp_flops(8, 16, 64) == 32_768
    # weights 2*16*64 + 64 + 16 = 2128; activations 8 * (2*16 + 64) = 768; 4 bytes each
    assert counts.mlp_bytes(8, 16, 64) == 4 * (2128 + 768) == 11_584
