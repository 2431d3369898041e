"""Scaled dot-product attention, the operation at the heart of the Transformer.

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, equation (1):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

``Q`` holds one query per position that asks, ``K`` one key and ``V`` one value per position
that can be looked at. Row ``t`` of the weight matrix says how much query ``t`` takes from each
value; every row sums to 1.

The NumPy functions show the math line by line (chapter "Self-attention" explains them;
chapter "Positional encoding" already uses them to show why positions are needed). The PyTorch
versions compute the same thing inside trainable models: :func:`scaled_dot_product_attention_torch`
and :class:`SelfAttention`, one attention head with its projections ``W_Q``, ``W_K``, ``W_V``
(section 3.2.2 stacks several of them into multi-head attention, see ``multi_head.py``).
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from transformer_tutorial.model.checks import check_positive_int

__all__ = [
    "SelfAttention",
    "SelfAttentionConfig",
    "dot_product_std",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_torch",
    "softmax",
    "softmax_saturation",
]


def softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Turn scores into weights that are positive and sum to 1 along ``axis``.

    ``softmax(x)_j = exp(x_j) / sum_k exp(x_k)``. Subtracting the maximum first changes
    nothing mathematically (it cancels between numerator and denominator) but keeps ``exp``
    from overflowing: scores of 1e4 are fine. Entries equal to ``-inf`` get weight 0; a slice
    that is ``-inf`` everywhere (nothing allowed) gets all-zero weights instead of NaN.
    """
    scores = np.asarray(scores, dtype=float)
    if scores.size == 0:
        raise ValueError(f"softmax needs at least one score, got shape {scores.shape}")
    if np.isnan(scores).any() or np.isposinf(scores).any():
        raise ValueError("scores must be finite or -inf (masked); found NaN or +inf")
    top = scores.max(axis=axis, keepdims=True)
    top = np.where(np.isneginf(top), 0.0, top)  # an all -inf slice: avoid (-inf) - (-inf) = NaN
    exps = np.exp(scores - top)
    total = exps.sum(axis=axis, keepdims=True)
    return np.divide(exps, total, out=np.zeros_like(exps), where=total > 0)


def scaled_dot_product_attention(
    queries: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Equation (1) of the paper. Returns ``(output, weights)``.

    Shapes (any leading batch dimensions ``...`` are allowed, the same for all three inputs):

    - ``queries`` ``(..., T, K)``, ``keys`` ``(..., S, K)``, ``values`` ``(..., S, V)``
    - ``mask`` (optional, boolean) broadcastable to ``(..., T, S)``: ``True`` where query ``t``
      may look at key ``s`` (the convention of ``torch.nn.functional.scaled_dot_product_attention``)
    - ``output`` ``(..., T, V)``, ``weights`` ``(..., T, S)``

    A query whose keys are all masked gets zero weights and a zero output, never NaN.
    """
    queries, keys, values = (np.asarray(a, dtype=float) for a in (queries, keys, values))
    _check_shapes(queries.shape, keys.shape, values.shape)

    d_k = queries.shape[-1]
    scores = queries @ np.swapaxes(keys, -1, -2) / np.sqrt(d_k)  # (..., T, K) @ (..., K, S)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != bool:
            raise ValueError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
        _check_mask_shape(mask.shape, scores.shape)
        scores = np.where(mask, scores, -np.inf)  # (..., T, S)
    weights = softmax(scores, axis=-1)  # (..., T, S), rows sum to 1
    return weights @ values, weights  # (..., T, S) @ (..., S, V) -> (..., T, V)


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
    if mask is None:
        weights = torch.softmax(scores, dim=-1)  # (..., T, S), rows sum to 1
        return weights @ values, weights  # (..., T, S) @ (..., S, V) -> (..., T, V)
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        dtype = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a boolean tensor (True = may attend), got {dtype}")
    _check_mask_shape(tuple(mask.shape), tuple(scores.shape))
    anything_allowed = mask.any(dim=-1, keepdim=True)  # (..., T, 1)
    scores = scores.masked_fill(~mask, float("-inf"))  # (..., T, S)
    if bool(anything_allowed.all()):  # the usual case: skip two passes over (..., T, S)
        weights = torch.softmax(scores, dim=-1)  # (..., T, S), rows sum to 1
        return weights @ values, weights  # (..., T, S) @ (..., S, V) -> (..., T, V)
    # A row with nothing allowed would be softmax(-inf, ..., -inf) = NaN (also in its gradient):
    # give it dummy finite scores, then zero its weights.
    scores = scores.masked_fill(~anything_allowed, 0.0)
    weights = torch.softmax(scores, dim=-1).masked_fill(~anything_allowed, 0.0)  # (..., T, S)
    return weights @ values, weights  # (..., T, S) @ (..., S, V) -> (..., T, V)


def dot_product_std(d_k: int, samples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Why section 3.2.1 divides by ``sqrt(d_k)``, measured.

    Draws ``samples`` pairs of vectors ``q, k`` of width ``d_k`` with independent standard
    normal entries and returns the standard deviation of ``q . k`` and of ``q . k / sqrt(d_k)``.
    ``q . k`` is a sum of ``d_k`` products, each with mean 0 and variance 1, so its variance is
    ``d_k``: the first number grows like ``sqrt(d_k)``, the second stays near 1.
    """
    for name, value in (("d_k", d_k), ("samples", samples)):
        check_positive_int(name, value)
    if samples < 2:
        raise ValueError(f"samples must be at least 2 to measure a spread, got {samples}")
    rng = np.random.default_rng(seed)
    queries = rng.standard_normal((samples, d_k))  # (N, K)
    keys = rng.standard_normal((samples, d_k))  # (N, K)
    dots = np.einsum("nk,nk->n", queries, keys)  # (N,): one q . k per pair
    return float(dots.std()), float((dots / np.sqrt(d_k)).std())


def softmax_saturation(
    d_k: int, *, scaled: bool, rows: int = 1000, keys: int = 10, seed: int = 0
) -> tuple[float, float]:
    """What unscaled scores do to the softmax, measured: ``(largest weight, gradient size)``.

    For ``rows`` queries, each scored against ``keys`` random keys (entries standard normal,
    width ``d_k``), returns the mean of each row's largest weight and the mean Frobenius norm of
    the softmax's Jacobian ``diag(p) - p p^T``, which is how strongly the weights respond to
    the scores. As ``p`` nears one-hot the Jacobian nears zero and learning stalls; dividing by
    ``sqrt(d_k)`` (``scaled=True``) keeps both numbers the same at every width.
    """
    for name, value in (("d_k", d_k), ("rows", rows), ("keys", keys)):
        check_positive_int(name, value)
    rng = np.random.default_rng(seed)
    queries = rng.standard_normal((rows, 1, d_k))  # (N, 1, K): one query per row
    key_vectors = rng.standard_normal((rows, keys, d_k))  # (N, S, K)
    scores = (queries @ key_vectors.transpose(0, 2, 1))[:, 0]  # (N, 1, S) -> (N, S)
    weights = softmax(scores / np.sqrt(d_k) if scaled else scores)  # (N, S)
    jacobian = weights[:, :, None] * np.eye(keys) - weights[:, :, None] * weights[:, None, :]
    return float(weights.max(axis=1).mean()), float(np.linalg.norm(jacobian, axis=(1, 2)).mean())


@dataclass
class SelfAttentionConfig:
    """Sizes of one attention head (section 3.2.1)."""

    d_model: int = 512  # width of the token vectors coming in (paper: 512)
    d_k: int = 64  # width of queries and keys (paper: 64 = 512 / 8 heads)
    d_v: int | None = None  # width of values; None means the same as d_k (paper: 64)
    bias: bool = False  # the paper's projections are plain matrices, without bias

    def __post_init__(self) -> None:
        for name in ("d_model", "d_k", "d_v"):
            value = getattr(self, name)
            if not (name == "d_v" and value is None):
                check_positive_int(name, value)

    @property
    def value_width(self) -> int:
        """``d_v``, with ``None`` resolved to ``d_k``."""
        return self.d_k if self.d_v is None else self.d_v


def linear(
    d_in: int, d_out: int, *, bias: bool, generator: torch.Generator | None = None
) -> nn.Linear:
    """An ``nn.Linear`` initialised like PyTorch's default, from ``generator``.

    ``nn.Linear(d_in, d_out)`` draws its initial weights from PyTorch's *global* generator;
    this one is built without drawing anything and then filled from ``generator``, so library
    code never touches global random state. Weight and bias ~ U(-1/sqrt(d_in), 1/sqrt(d_in)).
    """
    # nn.Linear draws its own initial weights from the global generator: let it, on a forked
    # copy of that generator's state, which is restored afterwards. (Building on the "meta"
    # device instead costs 1.5 s the first time, measured, in every notebook.)
    with torch.random.fork_rng(devices=[]):
        layer = nn.Linear(d_in, d_out, bias=bias)
    bound = 1.0 / math.sqrt(d_in)
    with torch.no_grad():
        layer.weight.uniform_(-bound, bound, generator=generator)  # (out, in)
        if layer.bias is not None:
            layer.bias.uniform_(-bound, bound, generator=generator)  # (out,)
    return layer


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


class SelfAttention(nn.Module):
    """One attention head over one sequence: ``softmax(X W_Q (X W_K)^T / sqrt(d_k)) X W_V``.

    ``W_Q`` and ``W_K`` are ``(D, K)`` matrices and ``W_V`` a ``(D, V)`` one (stored, as in
    every ``nn.Linear``, transposed: ``W_Q.weight`` has shape ``(K, D)``).
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
        """``x`` ``(B, T, D)``; ``mask`` boolean, broadcastable to ``(B, T, T)``.

        Returns ``output`` ``(B, T, V)`` and ``weights`` ``(B, T, T)``.
        """
        check_sequence(x, "x", self.config.d_model)
        queries = self.W_Q(x)  # (B, T, D) -> (B, T, K)
        keys = self.W_K(x)  # (B, T, D) -> (B, T, K)
        values = self.W_V(x)  # (B, T, D) -> (B, T, V)
        return scaled_dot_product_attention_torch(queries, keys, values, mask)
