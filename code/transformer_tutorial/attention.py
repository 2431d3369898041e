"""Scaled dot-product attention, the operation at the heart of the Transformer.

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, equation (1):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

``Q`` holds one query per position that asks, ``K`` one key and ``V`` one value per position
that can be looked at. Row ``t`` of the weight matrix says how much query ``t`` takes from each
value; every row sums to 1.

These NumPy functions show the math line by line (chapter "Self-attention" explains them;
chapter "Positional encoding" already uses them to show why positions are needed).
"""

import numpy as np

__all__ = ["scaled_dot_product_attention", "softmax"]


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
    for name, array in (("queries", queries), ("keys", keys), ("values", values)):
        if array.ndim < 2:
            raise ValueError(f"{name} must have shape (..., length, width), got {array.shape}")
    if not queries.ndim == keys.ndim == values.ndim:
        raise ValueError(
            f"queries, keys and values must have the same rank, got shapes "
            f"{queries.shape}, {keys.shape}, {values.shape}"
        )
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"queries (..., T, K) and keys (..., S, K) must share K, got "
            f"{queries.shape[-1]} and {keys.shape[-1]}"
        )
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(
            f"keys (..., S, K) and values (..., S, V) must share S, got "
            f"{keys.shape[-2]} and {values.shape[-2]}"
        )
    if 0 in (queries.shape[-2], keys.shape[-2], queries.shape[-1]):
        raise ValueError(
            f"empty input: queries {queries.shape}, keys {keys.shape}; "
            "attention needs at least one query, one key and one feature"
        )

    d_k = queries.shape[-1]
    scores = queries @ np.swapaxes(keys, -1, -2) / np.sqrt(d_k)  # (..., T, K) @ (..., K, S)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != bool:
            raise ValueError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
        try:
            fits = np.broadcast_shapes(mask.shape, scores.shape) == scores.shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"mask of shape {mask.shape} does not broadcast to the scores' shape "
                f"{scores.shape} (..., T, S)"
            )
        scores = np.where(mask, scores, -np.inf)  # (..., T, S)
    weights = softmax(scores, axis=-1)  # (..., T, S), rows sum to 1
    return weights @ values, weights  # (..., T, S) @ (..., S, V) -> (..., T, V)
