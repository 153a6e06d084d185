"""The decoder's sizes: its weights, the KV cache per sequence, its FLOPs, and what each layout
holds on its busiest device (counted before anything is allocated)."""

from __future__ import annotations

import dataclasses

from d2lhelpers.core import checks
from d2lhelpers.core.units import BYTES_PER_FLOAT

LAYOUTS = ("replicas", "replicas in lock step", "tensor parallel", "pipeline")
SPLIT_LAYOUTS = ("replicas", "tensor parallel", "pipeline")  # the seed's three


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes of the model: vocabulary, width, heads, layers, and the longest sequence."""

    vocab: int = 128
    width: int = 64
    heads: int = 4
    layers: int = 2
    max_len: int = 32

    def __post_init__(self):
        if self.width % self.heads:
            raise ValueError(f"width {self.width} must be a multiple of heads {self.heads}")

    @property
    def ffn(self) -> int:
        return 4 * self.width

    @property
    def layer_bytes(self) -> int:
        """Every layer's attention and MLP weights (what a split divides among devices)."""
        return BYTES_PER_FLOAT * self.layers * (4 * self.width**2 + 2 * self.width * self.ffn)

    @property
    def embedding_bytes(self) -> int:
        """Token and position embeddings and the unembedding (each split device keeps them)."""
        return BYTES_PER_FLOAT * (2 * self.vocab * self.width + self.max_len * self.width)

    @property
    def weight_bytes(self) -> int:
        return self.layer_bytes + self.embedding_bytes

    @property
    def kv_bytes_per_sequence(self) -> int:
        """Keys and values of every layer for one sequence of `max_len` tokens."""
        return BYTES_PER_FLOAT * 2 * self.layers * self.max_len * self.width

    def flops_per_token(self, context: int | None = None) -> int:
        """Multiply-adds x 2 of one token through the model (attention over `context`)."""
        context = self.max_len if context is None else context
        per_layer = 4 * self.width**2 + 2 * self.width * self.ffn + 2 * context * self.width
        return 2 * (self.layers * per_layer + self.width * self.vocab)


def decoder_config(width: int, layers: int, prompt_len: int, n_out: int, heads: int = 4):
    """The model for these sizes: its positions hold the prompt and the output."""
    checks.require_count("model width", width, heads, 4096)
    checks.require_count("layers", layers, 1, 64)
    checks.require_count("prompt length", prompt_len, 1, 512)
    checks.require_count("output length", n_out, 1, 512)
    if width % heads:
        raise ValueError(f"model width must be a multiple of {heads} heads, got {width}")
    return ModelConfig(width=width, heads=heads, layers=layers, max_len=prompt_len + n_out)


def bytes_per_device(layout: str, config: ModelConfig, n_devices: int, slots: int) -> int:
    """Weights plus KV cache that the busiest device of `layout` holds, for `slots` sequences
    in flight over `n_devices` ("one device": all on one)."""
    kv, weights = config.kv_bytes_per_sequence, config.weight_bytes
    if layout in ("replicas", "replicas in lock step"):
        return weights + -(-slots // n_devices) * kv
    if layout in ("tensor parallel", "pipeline"):  # a share of the layers, all embeddings
        share = -(-config.layer_bytes // n_devices)
        return share + config.embedding_bytes + -(-slots * kv // n_devices)
    if layout == "one device":
        return weights + slots * kv
    raise ValueError(f"layout must be one of {['one device', *LAYOUTS]}, got {layout!r}")
