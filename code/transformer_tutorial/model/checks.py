"""Argument checks shared by every module, so the same mistake gets the same message everywhere."""

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["check_positive_int", "check_table", "check_text", "check_token_ids"]


def check_positive_int(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is an int (or NumPy integer) above zero.

    ``True`` is an int to Python but never a size, so booleans are refused too.
    """
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_text(text: object, name: str = "text") -> str:
    """``text`` itself, if it is a string with something to tokenize in it."""
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{name} is empty: there is nothing to tokenize")
    return text


def check_table(table: object) -> None:
    """Raise ``ValueError`` unless ``table`` is an embedding table: a non-empty ``(vocab, D)``
    tensor."""
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or 0 in table.shape:
        shape = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
        raise ValueError(f"table must be a non-empty tensor of shape (vocab, D), got {shape}")


def check_token_ids(ids: torch.Tensor | Sequence[int], vocab_size: int) -> torch.Tensor:
    """``ids`` (any shape) as an int64 tensor, if they are integers naming rows of a table of
    ``vocab_size`` rows."""
    ids = torch.as_tensor(ids)
    if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex:
        raise ValueError(f"ids must hold integers, got dtype {ids.dtype}")
    if ids.numel() == 0:
        raise ValueError(f"ids is empty (shape {tuple(ids.shape)}): there is no token to look up")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"ids must lie in 0..{vocab_size - 1} (the table has {vocab_size} rows), "
            f"got values from {low} to {high}"
        )
    return ids.to(torch.int64)
