"""Scaled dot-product attention, the operation at the heart of the Transformer.

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, equation (1):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

``Q`` holds one query per position that asks, ``K`` one key and ``V`` one value per position
that can be looked at. Row ``t`` of the weight matrix says how much query ``t`` takes from each
value; every row sums to 1.

The file follows chapter "Self-attention":

1. :func:`softmax` and :func:`scaled_dot_product_attention`, in NumPy, line by line;
2. the same in PyTorch, for trainable models: :func:`scaled_dot_product_attention_torch`;
3. :class:`SelfAttention`, one head with its projections ``W_Q``, ``W_K``, ``W_V`` (section 3.2.2
   stacks several of them into multi-head attention, see ``multi_head.py``);
4. :func:`dot_product_std`, the measurement behind the division by ``sqrt(d_k)``.

The argument checks sit at the end, out of the way.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from transformer_tutorial.model.checks import check_positive_int
from transformer_tutorial.model.draws import uniform

__all__ = [
    "SelfAttention",
    "SelfAttentionConfig",
    "check_sequence",
    "dot_product_std",
    "linear",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_torch",
    "softmax",
]


# ---------------------------------------------------------------------------------------------
# Equation (1) in NumPy
# ---------------------------------------------------------------------------------------------


def softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Turn scores into weights that are positive and sum to 1 along ``axis``.

    ``softmax(x)_j = exp(x_j) / sum_k exp(x_k)``. Subtracting the largest score first changes
    nothing mathematically (``exp(-top)`` cancels between numerator and denominator) but keeps
    ``exp`` from overflowing: scores of 1e4 are fine. A score of ``-inf`` (masked) gets weight 0;
    a slice that is ``-inf`` everywhere (nothing allowed) gets all-zero weights instead of NaN.
    """
    scores = np.asarray(scores, dtype=float)
    _check_scores(scores)
    top = scores.max(axis=axis, keepdims=True)  # the largest score of each slice
    top = np.where(np.isneginf(top), 0.0, top)  # a slice of only -inf: subtract 0, not -inf
    exps = np.exp(scores - top)  # every entry at most e^0 = 1: no overflow
    total = exps.sum(axis=axis, keepdims=True)  # 0 only for a slice of only -inf
    return exps / np.where(total > 0, total, 1.0)  # that slice stays all zeros


def scaled_dot_product_attention(
    queries: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Equation (1) of the paper (section 3.2.1). Returns ``(output, weights)``.

    ``queries`` ``(..., T, K)``, ``keys`` ``(..., S, K)``, ``values`` ``(..., S, V)``; ``...``: any
    leading batch dimensions. ``mask`` (optional, boolean, broadcastable to ``(..., T, S)``) is
    True where query ``t`` may look at key ``s``; a query that may look at nothing gets zeros.
    """
    queries, keys, values = (np.asarray(a, dtype=float) for a in (queries, keys, values))
    _check_shapes(queries.shape, keys.shape, values.shape)

    d_k = queries.shape[-1]
    keys_transposed = np.swapaxes(keys, -1, -2)  # K^T: (..., S, K) -> (..., K, S)
    scores = queries @ keys_transposed / np.sqrt(d_k)  # (..., T, K) @ (..., K, S) -> (..., T, S)
    if mask is not None:
        mask = np.asarray(mask)
        _check_mask(mask, scores.shape)
        scores = np.where(mask, scores, -np.inf)  # a key it may not see: score -inf, weight 0
    weights = softmax(scores, axis=-1)  # (..., T, S), rows sum to 1
    output = weights @ values  # (..., T, S) @ (..., S, V) -> (..., T, V)
    return output, weights


# ---------------------------------------------------------------------------------------------
# The same in PyTorch, for models
# ---------------------------------------------------------------------------------------------


def scaled_dot_product_attention_torch(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`scaled_dot_product_attention` in PyTorch, for models: differentiable, any device.

    Same shapes, same boolean ``mask`` convention (``True`` = may attend), same errors, and the
    same answer for a query whose keys are all masked: zero weights and a zero output (PyTorch's
    own softmax would give NaN there). Returns ``(output, weights)``.
    """
    _check_shapes(tuple(queries.shape), tuple(keys.shape), tuple(values.shape))
    d_k = queries.shape[-1]
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(d_k)  # (..., T, K) @ (..., K, S)
    if mask is not None:
        _check_torch_mask(mask, tuple(scores.shape))
        scores = scores.masked_fill(~mask, float("-inf"))  # (..., T, S)
    weights = _masked_softmax_torch(scores, mask)  # (..., T, S), rows sum to 1 (or are all 0)
    output = weights @ values  # (..., T, S) @ (..., S, V) -> (..., T, V)
    return output, weights


def _masked_softmax_torch(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``torch.softmax`` over the last axis, with all-zero weights for a row that may see nothing.

    Such a row is all ``-inf``, and ``torch.softmax`` would give NaN (also in its gradient): it
    gets dummy finite scores first, then its weights are set to zero.
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    anything_allowed = mask.any(dim=-1, keepdim=True)  # (..., T, 1)
    if bool(anything_allowed.all()):  # the usual case: skip two passes over (..., T, S)
        return torch.softmax(scores, dim=-1)
    scores = scores.masked_fill(~anything_allowed, 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(~anything_allowed, 0.0)


# ---------------------------------------------------------------------------------------------
# One attention head as a module
# ---------------------------------------------------------------------------------------------


@dataclass
class SelfAttentionConfig:
    """Sizes of one attention head (section 3.2.1)."""

    d_model: int = 512  # width of the token vectors coming in (paper: 512)
    d_k: int = 64  # width of queries and keys (paper: 64 = 512 / 8 heads)
    d_v: int | None = None  # width of values; None means the same as d_k (paper: 64)
    bias: bool = False  # the paper's projections are plain matrices, without bias

    def __post_init__(self) -> None:
        check_positive_int("d_model", self.d_model)
        check_positive_int("d_k", self.d_k)
        if self.d_v is not None:
            check_positive_int("d_v", self.d_v)

    @property
    def value_width(self) -> int:
        """``d_v``, with ``None`` resolved to ``d_k``."""
        return self.d_k if self.d_v is None else self.d_v


def linear(
    d_in: int, d_out: int, *, bias: bool, generator: torch.Generator | None = None
) -> nn.Linear:
    """An ``nn.Linear`` initialised like PyTorch's default, from ``generator``.

    Weight and bias ~ U(-1/sqrt(d_in), 1/sqrt(d_in)), as ``nn.Linear(d_in, d_out)`` draws them,
    but from ``generator`` (library code never touches the global random state) and in float64
    first (:mod:`~transformer_tutorial.model.draws`: the same weights on every processor).
    """
    # nn.Linear draws its own initial weights from the global generator: let it, on a forked
    # copy of that generator's state, which is restored afterwards. (Building on the "meta"
    # device instead costs 1.5 s the first time, measured, in every notebook.)
    with torch.random.fork_rng(devices=[]):
        layer = nn.Linear(d_in, d_out, bias=bias)
    bound = 1.0 / math.sqrt(d_in)
    with torch.no_grad():
        layer.weight.copy_(uniform(layer.weight.shape, bound, generator))  # (out, in)
        if layer.bias is not None:
            layer.bias.copy_(uniform(layer.bias.shape, bound, generator))  # (out,)
    return layer


class SelfAttention(nn.Module):
    """One attention head over one sequence: ``softmax(X W_Q (X W_K)^T / sqrt(d_k)) X W_V``.

    ``W_Q`` and ``W_K`` are ``(D, K)`` matrices and ``W_V`` a ``(D, V)`` one. Like every
    ``nn.Linear``, each stores its matrix transposed: ``W_Q.weight`` has shape ``(K, D)``.
    """

    def __init__(self, config: SelfAttentionConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        d_model, d_k, d_v = config.d_model, config.d_k, config.value_width
        self.W_Q = linear(d_model, d_k, bias=config.bias, generator=generator)
        self.W_K = linear(d_model, d_k, bias=config.bias, generator=generator)
        self.W_V = linear(d_model, d_v, bias=config.bias, generator=generator)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` ``(B, T, D)``; ``mask`` optional, boolean, broadcastable to ``(B, T, T)``.

        Returns ``output`` ``(B, T, V)`` and ``weights`` ``(B, T, T)``.
        """
        check_sequence(x, "x", self.config.d_model)
        queries = self.W_Q(x)  # (B, T, D) -> (B, T, K)
        keys = self.W_K(x)  # (B, T, D) -> (B, T, K)
        values = self.W_V(x)  # (B, T, D) -> (B, T, V)
        return scaled_dot_product_attention_torch(queries, keys, values, mask)


# ---------------------------------------------------------------------------------------------
# Why divide by sqrt(d_k), measured
# ---------------------------------------------------------------------------------------------


def dot_product_std(d_k: int, samples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Why section 3.2.1 divides by ``sqrt(d_k)``, measured.

    Draws ``samples`` pairs of vectors ``q, k`` of width ``d_k`` with independent standard
    normal entries and returns the standard deviation of ``q . k`` and of ``q . k / sqrt(d_k)``.
    ``q . k`` is a sum of ``d_k`` products, each with mean 0 and variance 1, so its variance is
    ``d_k``: the first number grows like ``sqrt(d_k)``, the second stays near 1.
    """
    _check_sample_sizes(d_k, samples)
    rng = np.random.default_rng(seed)
    queries = rng.standard_normal((samples, d_k))  # (N, K)
    keys = rng.standard_normal((samples, d_k))  # (N, K)
    dots = np.einsum("nk,nk->n", queries, keys)  # (N,): one q . k per pair
    return float(dots.std()), float((dots / np.sqrt(d_k)).std())


# ---------------------------------------------------------------------------------------------
# Argument checks
# ---------------------------------------------------------------------------------------------


def _check_scores(scores: np.ndarray) -> None:
    if scores.size == 0:
        raise ValueError(f"softmax needs at least one score, got shape {scores.shape}")
    if np.isnan(scores).any() or np.isposinf(scores).any():
        raise ValueError("scores must be finite or -inf (masked); found NaN or +inf")


def _check_shapes(queries: tuple[int, ...], keys: tuple[int, ...], values: tuple[int, ...]) -> None:
    """The shape rules of equation (1), shared by the NumPy and the PyTorch version."""
    for name, shape in (("queries", queries), ("keys", keys), ("values", values)):
        if len(shape) < 2:
            raise ValueError(f"{name} must have shape (..., length, width), got {shape}")
    if not len(queries) == len(keys) == len(values):
        raise ValueError(
            f"queries, keys and values must have the same rank, got shapes "
            f"{queries}, {keys}, {values}"
        )
    if queries[-1] != keys[-1]:
        raise ValueError(
            f"queries (..., T, K) and keys (..., S, K) must share K, got "
            f"{queries[-1]} and {keys[-1]}"
        )
    if keys[-2] != values[-2]:
        raise ValueError(
            f"keys (..., S, K) and values (..., S, V) must share S, got {keys[-2]} and {values[-2]}"
        )
    if 0 in (queries[-2], keys[-2], queries[-1]):
        raise ValueError(
            f"empty input: queries {queries}, keys {keys}; "
            "attention needs at least one query, one key and one feature"
        )


def _check_mask(mask: np.ndarray, scores: tuple[int, ...]) -> None:
    if mask.dtype != bool:
        raise ValueError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
    _check_mask_shape(tuple(mask.shape), scores)


def _check_torch_mask(mask: torch.Tensor, scores: tuple[int, ...]) -> None:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        dtype = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a boolean tensor (True = may attend), got {dtype}")
    _check_mask_shape(tuple(mask.shape), scores)


def _check_mask_shape(mask: tuple[int, ...], scores: tuple[int, ...]) -> None:
    """A mask may broadcast *to* the scores' shape, never make it bigger."""
    try:
        fits = np.broadcast_shapes(mask, scores) == scores
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask of shape {mask} does not broadcast to the scores' shape {scores} (..., T, S)"
        )


def check_sequence(x: torch.Tensor, name: str, d_model: int) -> None:
    """``x`` must be a non-empty batch of sequences of width ``d_model``: ``(B, T, D)``."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a tensor of shape (B, T, D), got {type(x).__name__}")
    if x.dim() != 3:
        raise ValueError(
            f"{name} must have shape (B, T, D) = (batch, length, {d_model}), "
            f"got {tuple(x.shape)} (rank {x.dim()})"
        )
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{name} must have shape (B, T, {d_model}), got last dimension {x.shape[-1]} "
            f"(d_model of the input does not match the layer's d_model={d_model})"
        )
    if 0 in x.shape[:2]:
        raise ValueError(f"{name} is empty: shape {tuple(x.shape)}; need B >= 1 and T >= 1")


def _check_sample_sizes(d_k: int, samples: int) -> None:
    check_positive_int("d_k", d_k)
    check_positive_int("samples", samples)
    if samples < 2:
        raise ValueError(f"samples must be at least 2 to measure a spread, got {samples}")
