"""Masks: which keys each query may look at.

Source: Vaswani et al. (2017), section 3.2.3: in the decoder, "we need to prevent leftward
information flow ... We implement this inside of scaled dot-product attention by masking out
(setting to -inf) all values in the input of the softmax which correspond to illegal
connections." Padding masks do the same for ``[PAD]`` tokens added to make a batch rectangular.

Convention everywhere in the book: a mask is a **boolean** tensor, ``True`` where a query *may*
attend to a key, broadcastable to the attention scores ``(B, H, T, S)``:

- :func:`causal_mask` ``(T, S)``: query ``t`` sees keys ``0 .. t`` (lower triangle);
- :func:`padding_mask` / :func:`padding_mask_from_ids` ``(B, 1, 1, S)``: every query sees
  the real keys of its own sequence, never its ``[PAD]`` keys;
- :func:`combine_masks`: their logical AND, broadcast to one shape.

``attention.scaled_dot_product_attention_torch`` turns ``False`` into ``-inf`` before the
softmax and gives a row with no allowed key zero weights (instead of ``softmax`` of all
``-inf``, which is ``0 / 0 = NaN``): :func:`naive_masked_softmax` shows the NaN.
"""

import numpy as np
import torch

from transformer_tutorial.model.checks import check_positive_int

__all__ = [
    "causal_mask",
    "combine_masks",
    "naive_masked_softmax",
    "padding_mask",
    "padding_mask_from_ids",
]


def causal_mask(length: int, key_length: int | None = None) -> torch.Tensor:
    """Boolean ``(T, S)`` with ``T = length`` and ``S = key_length`` (default ``T``): query ``t``
    may attend to key ``s`` iff ``s <= t + (S - T)``.

    With ``S = T`` this is the lower triangle. ``S > T`` is the case of new queries appended to
    ``S - T`` earlier tokens (a prompt already processed): the last ``T`` positions of the
    sequence are the queries, and each still sees only itself and what came before.
    """
    check_positive_int("length", length)
    key_length = length if key_length is None else key_length
    check_positive_int("key_length", key_length)
    if key_length < length:
        raise ValueError(
            f"key_length={key_length} < length={length}: every query position must also be a "
            f"key position (queries are the last T of the S positions)"
        )
    queries = torch.arange(length)[:, None] + (key_length - length)  # (T, 1)
    keys = torch.arange(key_length)[None, :]  # (1, S)
    return keys <= queries  # (T, S)


def padding_mask(lengths: torch.Tensor | list[int], max_length: int | None = None) -> torch.Tensor:
    """Boolean ``(B, 1, 1, S)`` from the true length of each sequence in the batch: key ``s`` of
    sequence ``b`` is real iff ``s < lengths[b]``. ``S = max_length`` (default ``max(lengths)``).

    The two singleton axes are ``H`` and ``T``: the same keys are hidden from every head and
    every query. A length of 0 (a sequence that is all padding) is allowed.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.numel() == 0 or lengths.dtype.is_floating_point:
        raise ValueError(
            f"lengths must be a non-empty 1-D sequence of integers (B,), got shape "
            f"{tuple(lengths.shape)} and dtype {lengths.dtype}"
        )
    if (lengths < 0).any():
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    longest = int(lengths.max())
    max_length = longest if max_length is None else max_length
    check_positive_int("max_length", max_length)
    if longest > max_length:
        raise ValueError(f"a sequence of length {longest} does not fit max_length={max_length}")
    keys = torch.arange(max_length)  # (S,)
    real = keys[None, :] < lengths[:, None]  # (1, S) < (B, 1) -> (B, S)
    return real[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def padding_mask_from_ids(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Boolean ``(B, 1, 1, S)`` from token IDs ``(B, S)``: ``True`` where the ID is not
    ``pad_id``. Works whichever side the padding is on."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point:
        shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"ids must be an integer tensor of shape (B, S), got {shape}")
    return (ids != pad_id)[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks broadcast to one shape, e.g. causal ``(T, T)`` with padding
    ``(B, 1, 1, T)`` -> ``(B, 1, T, T)``. ``None`` entries mean "no mask" and are skipped;
    with nothing left the result is ``None``."""
    present = [mask for mask in masks if mask is not None]
    for mask in present:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            dtype = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(f"masks must be boolean tensors (True = may attend), got {dtype}")
    if not present:
        return None
    try:
        # Checked first, for a clear message. NumPy's rule is PyTorch's; torch.broadcast_shapes
        # would import SymPy (about 1 s).
        np.broadcast_shapes(*(tuple(mask.shape) for mask in present))
    except ValueError as error:
        shapes = [tuple(mask.shape) for mask in present]
        raise ValueError(f"masks of shapes {shapes} do not broadcast together") from error
    combined = present[0]
    for mask in present[1:]:
        combined = combined & mask  # (...) & (...) broadcasts to the common shape
    return combined


def naive_masked_softmax(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Softmax over the last axis after setting masked scores to ``-inf``, with no special
    case: a row whose keys are all masked comes out as ``NaN`` (``exp(-inf) = 0`` everywhere,
    and ``0 / 0``). This is the failure the library's attention avoids; shown, not used."""
    scores = np.asarray(scores, dtype=float)
    mask = np.asarray(mask, dtype=bool)
    np.broadcast_shapes(scores.shape, mask.shape)  # raises ValueError on a mismatch
    masked = np.where(mask, scores, -np.inf)  # (..., T, S)
    with np.errstate(invalid="ignore"):
        shifted = masked - masked.max(axis=-1, keepdims=True)  # -inf - -inf = NaN on dead rows
        exponentials = np.exp(shifted)
        return exponentials / exponentials.sum(axis=-1, keepdims=True)
