"""Positional encoding: telling attention *where* each token stands.

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.5:

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Even dimensions take the sine, odd dimensions the cosine, and each (sine, cosine) pair shares
one frequency ``omega_i = 1 / 10000^(2i / d_model)``. The table is added to the token
embeddings. Learned absolute position embeddings (section 3.5's alternative, used by BERT and
GPT-2) are a trainable lookup table of the same shape.

The file follows chapter "Positional encoding": the NumPy functions :func:`frequencies` and
:func:`sinusoidal_encoding` show the math; the ``torch.nn.Module`` classes
:class:`SinusoidalPositionalEncoding` and :class:`LearnedPositionalEmbedding` are what a model
uses. What the chapter proves about the table (a shift is a rotation, similarity depends only
on distance, the ``[sin | cos]`` layout) is in ``studies/position_geometry.py``.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from transformer_tutorial.model.checks import check_positive_int
from transformer_tutorial.model.draws import normal

__all__ = [
    "LearnedPositionalEmbedding",
    "PositionalConfig",
    "SinusoidalPositionalEncoding",
    "frequencies",
    "sinusoidal_encoding",
]


# ---------------------------------------------------------------------------------------------
# The table, in NumPy
# ---------------------------------------------------------------------------------------------


def frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    """Angular frequency of each (sine, cosine) pair: ``omega_i = base^(-2i / d_model)``.

    Returns shape ``(D // 2,)``, from 1 (pair 0, one turn every 2*pi positions) down to
    almost ``1 / base`` (the last pair, which barely moves over thousands of positions).
    """
    _check_d_model(d_model)
    _check_base(base)
    pair = np.arange(d_model // 2)  # i = 0, 1, ..., D/2 - 1
    return base ** (-2.0 * pair / d_model)  # (D/2,)


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The paper's table (section 3.5): sine in even dimensions, cosine in odd ones.

    Returns ``PE`` of shape ``(P, D)`` with ``P = max_len``, in float64: row ``pos`` is the
    vector added to the token at position ``pos``.
    """
    check_positive_int("max_len", max_len)
    _check_d_model(d_model)
    positions = np.arange(max_len)[:, None]  # (P, 1): pos = 0, 1, ..., P - 1
    omega = frequencies(d_model, base)[None, :]  # (1, D/2)
    angles = positions * omega  # (P, 1) * (1, D/2) -> (P, D/2): the angle of pair i at pos
    table = np.empty((max_len, d_model))  # (P, D)
    table[:, 0::2] = np.sin(angles)  # dimensions 0, 2, 4, ... (even): sine
    table[:, 1::2] = np.cos(angles)  # dimensions 1, 3, 5, ... (odd): cosine
    return table


# ---------------------------------------------------------------------------------------------
# The modules a model uses
# ---------------------------------------------------------------------------------------------


@dataclass
class PositionalConfig:
    """Sizes shared by the fixed and the learned position modules."""

    d_model: int = 512  # width of token vectors (paper: 512)
    max_len: int = 5000  # longest sequence the table covers
    base: float = 10000.0  # wavelength scale of the sinusoids (paper: 10000)
    dropout: float = 0.0  # applied to embedding + position (paper: 0.1 while training)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the paper's fixed sinusoidal table to token embeddings: ``x + PE[:T]``.

    The table is a buffer, not a parameter: it moves with ``.to(device)`` but no optimiser ever
    changes it, and it is not saved in the state dict (it is recomputed from the formula).
    """

    def __init__(self, config: PositionalConfig):
        super().__init__()
        self.config = config
        table = sinusoidal_encoding(config.max_len, config.d_model, config.base)  # (P, D)
        self.register_buffer("table", torch.tensor(table, dtype=torch.float32), persistent=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: token embeddings ``(B, T, D)``; returns ``(B, T, D)``."""
        _check_embeddings(x, self.config.d_model, self.config.max_len)
        length = x.shape[1]  # T
        positions = self.table[:length].to(x.dtype)  # (P, D) -> (T, D): rows 0 .. T - 1
        return self.dropout(x + positions)  # (B, T, D) + (T, D): the same rows for every sentence


class LearnedPositionalEmbedding(nn.Module):
    """Adds a trainable row per position (BERT, GPT-2): ``x + P[:T]`` with ``P`` learned.

    Rows start as small random numbers and are shaped by backpropagation like any weight.
    Unlike the sinusoidal table it has nothing to say about positions beyond ``max_len``.
    """

    def __init__(self, config: PositionalConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        # (P, D), given storage without an initial draw from the global generator
        self.embedding = nn.Embedding(
            config.max_len, config.d_model, _weight=torch.empty(config.max_len, config.d_model)
        )
        with torch.no_grad():  # BERT and GPT-2 both start from N(0, 0.02^2)
            if not self.embedding.weight.is_meta:  # shapes only (parameter counting)
                self.embedding.weight.copy_(normal(self.embedding.weight.shape, 0.02, generator))
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: token embeddings ``(B, T, D)``; returns ``(B, T, D)``."""
        _check_embeddings(x, self.config.d_model, self.config.max_len)
        positions = torch.arange(x.shape[1], device=x.device)  # (T,): 0, 1, ..., T - 1
        return self.dropout(x + self.embedding(positions))  # (B, T, D) + (T, D)


# ---------------------------------------------------------------------------------------------
# Argument checks
# ---------------------------------------------------------------------------------------------


def _check_d_model(d_model: int) -> None:
    check_positive_int("d_model", d_model)
    if d_model % 2:
        raise ValueError(
            f"d_model must be even for a sinusoidal encoding (each frequency fills a sine and a "
            f"cosine dimension), got d_model={d_model}"
        )


def _check_base(base: float) -> None:
    if base <= 1:
        raise ValueError(f"base must be greater than 1, got {base!r}")


def _check_embeddings(x: torch.Tensor, d_model: int, max_len: int) -> None:
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
