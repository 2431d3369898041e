"""Multi-head attention: several attention heads side by side, each free to look somewhere else.

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.2.2:

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O
    head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i)

with ``W_Q^i, W_K^i`` of shape ``(D, K)``, ``W_V^i`` of shape ``(D, V)`` and ``W_O`` of shape
``(H V, D)``. The paper uses ``h = 8`` heads of width ``d_k = d_v = d_model / h = 64``.

Two implementations of the same function:

- :class:`SeparateHeadsAttention` is the formula as written: ``h`` independent
  :class:`~transformer_tutorial.model.attention.SelfAttention` heads, concatenated, then ``W_O``.
- :class:`MultiHeadAttention` is how every real implementation does it: one ``(D, D)``
  projection per role holds all ``h`` heads' matrices side by side, and a reshape splits its
  output into heads. The tests (and chapter "Multi-head attention") show the two agree.

:func:`copy_from_torch` loads the weights of PyTorch's ``nn.MultiheadAttention`` so the tests can
compare against it, and :func:`multi_head_cost` counts parameters and multiply-adds.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from transformer_tutorial.model.attention import (
    SelfAttention,
    SelfAttentionConfig,
    check_sequence,
    linear,
    scaled_dot_product_attention_torch,
)
from transformer_tutorial.model.checks import check_positive_int

__all__ = [
    "AttentionCost",
    "MultiHeadAttention",
    "MultiHeadConfig",
    "SeparateHeadsAttention",
    "copy_from_torch",
    "multi_head_cost",
    "separate_heads_from",
]


@dataclass
class MultiHeadConfig:
    """Sizes of a multi-head attention layer (section 3.2.2)."""

    d_model: int = 512  # width of the token vectors in and out (paper: 512)
    num_heads: int = 8  # h, fixed before training; must divide d_model (paper: 8)
    bias: bool = True  # bias in every projection, as nn.MultiheadAttention (paper: none shown)

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads"):
            check_positive_int(name, getattr(self, name))
        if self.d_model % self.num_heads:
            raise ValueError(
                f"num_heads={self.num_heads} does not divide d_model={self.d_model}: each head "
                f"gets d_k = d_model / num_heads dimensions, which must be a whole number"
            )

    @property
    def d_k(self) -> int:
        """Width of one head's queries, keys and values: ``d_model // num_heads``."""
        return self.d_model // self.num_heads


def _check_inputs(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, d_model: int
) -> None:
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        check_sequence(tensor, name, d_model)
    if not query.shape[0] == key.shape[0] == value.shape[0]:
        raise ValueError(
            f"query, key and value must have the same batch size B, got shapes "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if key.shape[1] != value.shape[1]:
        raise ValueError(
            f"key (B, S, D) and value (B, S, D) must have the same length S, got "
            f"{key.shape[1]} and {value.shape[1]}"
        )


def _check_mask(mask: torch.Tensor, expected: tuple[int, ...], letters: str) -> None:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        dtype = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a boolean tensor (True = may attend), got {dtype}")
    shape = tuple(mask.shape)
    try:
        fits = len(shape) <= len(expected) and np.broadcast_shapes(shape, expected) == expected
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask of shape {shape} does not broadcast to {letters} = {expected}; "
            f"e.g. (T, S) for one mask shared by every sequence and head"
        )


def _fused_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """Equation (1) by PyTorch's fused kernel, ``F.scaled_dot_product_attention``: the output of
    :func:`~transformer_tutorial.model.attention.scaled_dot_product_attention_torch` without its
    weights. ``queries`` ``(B, H, T, K)``, ``keys`` and ``values`` ``(B, H, S, K)``, ``mask``
    boolean broadcastable to ``(B, H, T, S)``; returns ``(B, H, T, K)``.

    The kernel never stores the ``(B, H, T, S)`` weights, which is where its speed comes from.
    A query whose keys are all masked gets a zero output, as in the slow path: such rows are
    let see every key (so no backend ever computes ``softmax`` of all ``-inf``), then zeroed.
    """
    if mask is None:
        return F.scaled_dot_product_attention(queries, keys, values)  # (B, H, T, K)
    anything_allowed = mask.any(dim=-1, keepdim=True)  # (..., T, 1)
    if bool(anything_allowed.all()):
        return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
    per_head = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=mask | ~anything_allowed
    )  # (B, H, T, K); rows with nothing allowed are computed over every key, then zeroed
    return per_head.masked_fill(~anything_allowed, 0.0)  # (..., T, 1) broadcasts over K


class MultiHeadAttention(nn.Module):
    """All heads at once: three ``(D, D)`` projections split into ``H`` heads, then ``W_O``.

    Columns ``h K .. (h + 1) K`` of ``W_Q`` (rows of ``W_Q.weight``, which ``nn.Linear`` stores
    transposed) are head ``h``'s own ``(D, K)`` query matrix; likewise for ``W_K`` and ``W_V``.
    """

    def __init__(self, config: MultiHeadConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        d_model, bias = config.d_model, config.bias
        self.W_Q = linear(d_model, d_model, bias=bias, generator=generator)  # H heads of (D, K)
        self.W_K = linear(d_model, d_model, bias=bias, generator=generator)  # H heads of (D, K)
        self.W_V = linear(d_model, d_model, bias=bias, generator=generator)  # H heads of (D, K)
        self.W_O = linear(d_model, d_model, bias=bias, generator=generator)  # (H K, D)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Self-attention when only ``query`` ``(B, T, D)`` is given; otherwise ``key`` and
        ``value`` ``(B, S, D)`` come from another sequence (``value`` defaults to ``key``).

        ``mask`` is boolean (``True`` = may attend) and broadcastable to ``(B, H, T, S)``.
        Returns ``output`` ``(B, T, D)`` and, if ``need_weights``, every head's weights
        ``(B, H, T, S)`` (``nn.MultiheadAttention`` returns their mean over ``H``).

        ``need_weights=False`` takes a fast path: PyTorch's fused
        ``F.scaled_dot_product_attention`` computes the same output (equal within float
        rounding, as the tests check) without ever storing the weights; ``None`` is returned
        in their place.
        """
        key = query if key is None else key
        value = key if value is None else value
        _check_inputs(query, key, value, self.config.d_model)
        batch, length, d_model = query.shape
        key_length = key.shape[1]
        heads, d_k = self.config.num_heads, self.config.d_k
        if mask is not None:
            _check_mask(mask, (batch, heads, length, key_length), "(B, H, T, S)")

        queries = self.W_Q(query).view(batch, length, heads, d_k)  # (B, T, D) -> (B, T, H, K)
        keys = self.W_K(key).view(batch, key_length, heads, d_k)  # (B, S, D) -> (B, S, H, K)
        values = self.W_V(value).view(batch, key_length, heads, d_k)  # (B, S, D) -> (B, S, H, K)
        queries = queries.transpose(1, 2)  # (B, T, H, K) -> (B, H, T, K)
        keys = keys.transpose(1, 2)  # (B, S, H, K) -> (B, H, S, K)
        values = values.transpose(1, 2)  # (B, S, H, K) -> (B, H, S, K)

        if need_weights:
            per_head, weights = scaled_dot_product_attention_torch(queries, keys, values, mask)
            # per_head (B, H, T, K), weights (B, H, T, S): every head attends independently
        else:
            per_head, weights = _fused_attention(queries, keys, values, mask), None
            # per_head (B, H, T, K): the same numbers, without materialising the weights
        concatenated = per_head.transpose(1, 2).reshape(batch, length, d_model)
        # (B, H, T, K) -> (B, T, H, K) -> (B, T, H K) = (B, T, D): head h fills columns hK..(h+1)K
        output = self.W_O(concatenated)  # (B, T, D) -> (B, T, D)
        return output, weights


class SeparateHeadsAttention(nn.Module):
    """The formula of section 3.2.2 written out: ``H`` separate heads, concatenated, ``W_O``.

    Self-attention only (one input sequence). Slower than :class:`MultiHeadAttention`, since it
    runs the heads one after the other, and otherwise the same function: see
    :func:`separate_heads_from`.
    """

    def __init__(self, config: MultiHeadConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        head_config = SelfAttentionConfig(
            d_model=config.d_model, d_k=config.d_k, d_v=config.d_k, bias=config.bias
        )
        self.heads = nn.ModuleList(
            SelfAttention(head_config, generator=generator) for _ in range(config.num_heads)
        )
        self.W_O = linear(config.d_model, config.d_model, bias=config.bias, generator=generator)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` ``(B, T, D)``; ``mask`` boolean, broadcastable to ``(B, T, T)``, shared by all
        heads. Returns ``output`` ``(B, T, D)`` and ``weights`` ``(B, H, T, T)``."""
        check_sequence(x, "x", self.config.d_model)
        if mask is not None:
            _check_mask(mask, (x.shape[0], x.shape[1], x.shape[1]), "(B, T, T)")
        results = [head(x, mask) for head in self.heads]  # H pairs: (B, T, K), (B, T, T)
        concatenated = torch.cat([output for output, _ in results], dim=-1)
        # H x (B, T, K) -> (B, T, H K) = (B, T, D): head h fills columns hK..(h+1)K
        weights = torch.stack([head_weights for _, head_weights in results], dim=1)
        # H x (B, T, T) -> (B, H, T, T)
        return self.W_O(concatenated), weights  # (B, T, D) -> (B, T, D)


@torch.no_grad()
def separate_heads_from(fused: MultiHeadAttention) -> SeparateHeadsAttention:
    """A :class:`SeparateHeadsAttention` holding exactly the weights of ``fused``, head by head.

    Head ``h`` gets rows ``h K .. (h + 1) K`` of ``fused.W_Q.weight`` (shape ``(D, D)``, i.e.
    columns ``h K .. (h + 1) K`` of the matrix ``W_Q``) and of its bias; likewise for ``W_K``,
    ``W_V``. ``W_O`` is copied as is. The copy has ``fused``'s dtype and device.
    """
    separate = SeparateHeadsAttention(fused.config, generator=torch.Generator().manual_seed(0))
    separate.to(dtype=fused.W_Q.weight.dtype, device=fused.W_Q.weight.device)
    d_k = fused.config.d_k
    for index, head in enumerate(separate.heads):
        rows = slice(index * d_k, (index + 1) * d_k)  # head h's K output features
        for name in ("W_Q", "W_K", "W_V"):
            source, target = getattr(fused, name), getattr(head, name)
            target.weight.copy_(source.weight[rows])  # (D, D) -> (K, D)
            if source.bias is not None:
                target.bias.copy_(source.bias[rows])  # (D,) -> (K,)
    separate.W_O.load_state_dict(fused.W_O.state_dict())
    return separate


@torch.no_grad()
def copy_from_torch(
    target: MultiHeadAttention, source: nn.MultiheadAttention
) -> MultiHeadAttention:
    """Load the weights of PyTorch's ``nn.MultiheadAttention`` into ``target``; returns ``target``.

    PyTorch keeps the three input projections stacked in one ``in_proj_weight`` of shape
    ``(3 D, D)``: rows ``0..D`` are ``W_Q``, ``D..2D`` are ``W_K``, ``2D..3D`` are ``W_V``
    (transposed, as in ``nn.Linear``); ``out_proj`` is ``W_O``. Its heads split each projection's
    output the same way :class:`MultiHeadAttention` does, so no reordering is needed.
    """
    config = target.config
    if source.embed_dim != config.d_model or source.num_heads != config.num_heads:
        raise ValueError(
            f"source has d_model={source.embed_dim}, num_heads={source.num_heads}; target has "
            f"d_model={config.d_model}, num_heads={config.num_heads}"
        )
    if not source._qkv_same_embed_dim or source.bias_k is not None or source.add_zero_attn:
        raise ValueError("source must use one in_proj_weight, no bias_k/bias_v, no add_zero_attn")
    if (source.in_proj_bias is not None) != config.bias:
        raise ValueError(
            f"bias mismatch: source {'has' if source.in_proj_bias is not None else 'has no'} "
            f"bias, target config.bias={config.bias}"
        )
    d_model = config.d_model
    for index, name in enumerate(("W_Q", "W_K", "W_V")):
        rows = slice(index * d_model, (index + 1) * d_model)
        getattr(target, name).weight.copy_(source.in_proj_weight[rows])  # (3D, D) -> (D, D)
        if config.bias:
            getattr(target, name).bias.copy_(source.in_proj_bias[rows])  # (3D,) -> (D,)
    target.W_O.weight.copy_(source.out_proj.weight)  # (D, D)
    if config.bias:
        target.W_O.bias.copy_(source.out_proj.bias)  # (D,)
    return target


@dataclass(frozen=True)
class AttentionCost:
    """What one multi-head attention layer costs, counted by hand (biases included)."""

    parameters: int  # W_Q, W_K, W_V, W_O and their biases
    projection_macs: int  # multiply-adds of Q, K, V = X W and of the output projection
    score_macs: int  # multiply-adds of Q K^T, over all heads
    mixing_macs: int  # multiply-adds of weights @ V, over all heads

    @property
    def total_macs(self) -> int:
        return self.projection_macs + self.score_macs + self.mixing_macs


def multi_head_cost(d_model: int, num_heads: int, length: int) -> AttentionCost:
    """Parameters and multiply-adds of :class:`MultiHeadAttention` on one sequence of ``length``
    tokens (self-attention, ``T = S = length``).

    - projections: 4 matrices of ``D x D`` (+ ``D`` bias each), ``4 T D^2`` multiply-adds, no
      matter how the ``D`` output columns are split into heads;
    - scores: ``H`` heads x ``T x T`` dot products of width ``K = D / H``: ``T^2 D``;
    - mixing: ``H`` heads x ``T`` outputs x ``T`` weights x ``K`` features: ``T^2 D``.

    ``H`` cancels everywhere: eight heads of width 64 cost what one head of width 512 costs.
    """
    MultiHeadConfig(d_model=d_model, num_heads=num_heads)  # validates d_model and num_heads
    check_positive_int("length", length)
    d_k = d_model // num_heads
    return AttentionCost(
        parameters=4 * (d_model * d_model + d_model),
        projection_macs=4 * length * d_model * d_model,
        score_macs=num_heads * length * length * d_k,
        mixing_macs=num_heads * length * length * d_k,
    )
