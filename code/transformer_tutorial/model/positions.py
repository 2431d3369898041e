"""Positional encoding: telling attention *where* each token stands.

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.5:

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Even dimensions take the sine, odd dimensions the cosine, and each (sine, cosine) pair shares
one frequency ``omega_i = 1 / 10000^(2i / d_model)``. The table is added to the token
embeddings. Learned absolute position embeddings (section 3.5's alternative, used by BERT and
GPT-2) are a trainable lookup table of the same shape.

The pure NumPy functions show the math; the ``torch.nn.Module`` classes are what a model uses.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from transformer_tutorial.model.checks import check_positive_int

__all__ = [
    "LearnedPositionalEmbedding",
    "PositionalConfig",
    "SinusoidalPositionalEncoding",
    "concatenated_to_interleaved",
    "frequencies",
    "rotation_matrix",
    "similarity_by_distance",
    "sinusoidal_encoding",
    "sinusoidal_encoding_concatenated",
]


def _check_sizes(max_len: int, d_model: int) -> None:
    check_positive_int("max_len", max_len)
    check_positive_int("d_model", d_model)
    if d_model % 2:
        raise ValueError(
            f"d_model must be even for a sinusoidal encoding (each frequency fills a sine and a "
            f"cosine dimension), got d_model={d_model}"
        )


def frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    """Angular frequency of each (sine, cosine) pair: ``omega_i = base^(-2i / d_model)``.

    Returns shape ``(D // 2,)``, from 1 (pair 0, one turn every 2*pi positions) down to
    almost ``1 / base`` (the last pair, which barely moves over thousands of positions).
    """
    _check_sizes(1, d_model)
    if base <= 1:
        raise ValueError(f"base must be greater than 1, got {base!r}")
    pair = np.arange(d_model // 2)  # i = 0 .. D/2 - 1
    return base ** (-2.0 * pair / d_model)  # (D/2,)


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The paper's table, interleaved: sine in even dimensions, cosine in odd ones.

    Returns ``PE`` of shape ``(L, D)`` with ``L = max_len``, in float64.
    """
    _check_sizes(max_len, d_model)
    angles = np.arange(max_len)[:, None] * frequencies(d_model, base)[None, :]  # (L, D/2)
    table = np.empty((max_len, d_model))
    table[:, 0::2] = np.sin(angles)  # dimensions 0, 2, 4, ... (even): sine
    table[:, 1::2] = np.cos(angles)  # dimensions 1, 3, 5, ... (odd): cosine
    return table


def sinusoidal_encoding_concatenated(
    max_len: int, d_model: int, base: float = 10000.0
) -> np.ndarray:
    """The ``[sin | cos]`` layout some figures and libraries use: all sines first, then all cosines.

    It holds exactly the same numbers as :func:`sinusoidal_encoding`, in another column order
    (see :func:`concatenated_to_interleaved`). Shape ``(L, D)``.
    """
    _check_sizes(max_len, d_model)
    angles = np.arange(max_len)[:, None] * frequencies(d_model, base)[None, :]  # (L, D/2)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # (L, D)


def concatenated_to_interleaved(d_model: int) -> np.ndarray:
    """Column order that turns the ``[sin | cos]`` table into the paper's interleaved one.

    ``sinusoidal_encoding_concatenated(L, D)[:, order] == sinusoidal_encoding(L, D)``.
    """
    _check_sizes(1, d_model)
    half = d_model // 2
    order = np.empty(d_model, dtype=np.int64)
    order[0::2] = np.arange(half)  # sine of pair i sits in column i of [sin | cos]
    order[1::2] = half + np.arange(half)  # cosine of pair i sits in column half + i
    return order


def rotation_matrix(shift: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The fixed matrix ``M_k`` with ``PE[pos + k] = M_k @ PE[pos]`` for every ``pos``.

    It is block diagonal: pair ``i`` is rotated by the angle ``k * omega_i``,
    ``[sin, cos] -> [[cos a, sin a], [-sin a, cos a]] @ [sin, cos]``. Because ``M_k`` does not
    depend on ``pos``, a shift by ``k`` positions looks the same everywhere in the sequence.
    Shape ``(D, D)``.
    """
    _check_sizes(1, d_model)
    angles = shift * frequencies(d_model, base)  # (D/2,)
    matrix = np.zeros((d_model, d_model))
    cos, sin = np.cos(angles), np.sin(angles)
    matrix[0::2, 0::2] = np.diag(cos)  # new sine   = sin*cos(a) + cos*sin(a)
    matrix[0::2, 1::2] = np.diag(sin)
    matrix[1::2, 0::2] = np.diag(-sin)  # new cosine = cos*cos(a) - sin*sin(a)
    matrix[1::2, 1::2] = np.diag(cos)
    return matrix


def similarity_by_distance(distance: np.ndarray | int, d_model: int, base: float = 10000.0):
    """``PE(p) . PE(q)`` as a function of ``distance = p - q`` alone.

    Each pair contributes ``sin(a)sin(b) + cos(a)cos(b) = cos(a - b)``, so the dot product is
    ``sum_i cos(omega_i * (p - q))``: it never looks at ``p`` or ``q`` on their own.
    Returns an array shaped like ``distance``; the value at distance 0 is ``D / 2``.
    """
    distance = np.asarray(distance, dtype=float)
    omega = frequencies(d_model, base)  # (D/2,)
    return np.cos(distance[..., None] * omega).sum(axis=-1)  # (...,)


@dataclass
class PositionalConfig:
    """Sizes shared by the fixed and the learned position modules."""

    d_model: int = 512  # width of token vectors (paper: 512)
    max_len: int = 5000  # longest sequence the table covers
    base: float = 10000.0  # wavelength scale of the sinusoids (paper: 10000)
    dropout: float = 0.0  # applied to embedding + position (paper: 0.1 while training)


def _check_input(x: torch.Tensor, d_model: int, max_len: int) -> None:
    if x.dim() != 3:
        raise ValueError(f"x must have shape (B, T, D), got {tuple(x.shape)} (rank {x.dim()})")
    _, length, width = x.shape
    if width != d_model:
        raise ValueError(f"x must have shape (B, T, {d_model}), got last dimension {width}")
    if length == 0:
        raise ValueError("x holds an empty sequence (T = 0); there is no position to encode")
    if length > max_len:
        raise ValueError(
            f"sequence length T={length} is longer than the position table (max_len={max_len})"
        )


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the paper's fixed sinusoidal table to token embeddings: ``x + PE[:T]``.

    The table is a buffer, not a parameter: it moves with ``.to(device)`` and is saved in the
    state dict, but no optimiser ever changes it.
    """

    def __init__(self, config: PositionalConfig):
        super().__init__()
        self.config = config
        table = sinusoidal_encoding(config.max_len, config.d_model, config.base)  # (L, D)
        self.register_buffer("table", torch.tensor(table, dtype=torch.float32), persistent=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: token embeddings ``(B, T, D)``; returns ``(B, T, D)``."""
        _check_input(x, self.config.d_model, self.config.max_len)
        positions = self.table[: x.shape[1]].to(x.dtype)  # (L, D) -> (T, D)
        return self.dropout(x + positions)  # (B, T, D) + (T, D) broadcasts over B


class LearnedPositionalEmbedding(nn.Module):
    """Adds a trainable row per position (BERT, GPT-2): ``x + P[:T]`` with ``P`` learned.

    Rows start as small random numbers and are shaped by backpropagation like any weight.
    Unlike the sinusoidal table it has nothing to say about positions beyond ``max_len``.
    """

    def __init__(self, config: PositionalConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        # (L, D), given storage without an initial draw from the global generator
        self.embedding = nn.Embedding(
            config.max_len, config.d_model, _weight=torch.empty(config.max_len, config.d_model)
        )
        with torch.no_grad():  # BERT and GPT-2 both start from N(0, 0.02^2)
            if not self.embedding.weight.is_meta:  # shapes only (parameter counting)
                self.embedding.weight.normal_(0.0, 0.02, generator=generator)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: token embeddings ``(B, T, D)``; returns ``(B, T, D)``."""
        _check_input(x, self.config.d_model, self.config.max_len)
        positions = torch.arange(x.shape[1], device=x.device)  # (T,)
        return self.dropout(x + self.embedding(positions))  # (B, T, D) + (T, D)
