"""Token IDs to vectors: the embedding table, looked up by row.

Sources:

- Vaswani et al. (2017), "Attention Is All You Need", section 3.4 ("Embeddings and Softmax"):
  learned embeddings convert the input tokens to vectors of dimension ``d_model`` (and the paper
  multiplies them by ``sqrt(d_model)``); section 3.5 then adds the positional encoding, so the
  vector entering the first layer is ``x_i = E(token_i) + PE(i)``.

The real table is all-MiniLM-L6-v2's, ``(30522, 384)``, read from ``model.safetensors`` with
``safetensors`` only. Shapes use the package letters, ``B`` batch, ``T`` tokens, ``D``
``d_model``, plus ``vocab``, the vocabulary size (rows of the table; ``V`` already means ``d_v``).
"""

import math
import os
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn

from transformer_tutorial.model.checks import check_table, check_token_ids
from transformer_tutorial.model.files import require_files
from transformer_tutorial.model.positions import sinusoidal_encoding

__all__ = [
    "POSITION_EMBEDDINGS_KEY",
    "WORD_EMBEDDINGS_KEY",
    "embedding_module",
    "input_vectors",
    "load_position_embeddings",
    "load_word_embeddings",
    "lookup_by_index",
    "lookup_by_one_hot",
]


WORD_EMBEDDINGS_KEY = "embeddings.word_embeddings.weight"  # (vocab, D) = (30522, 384)
POSITION_EMBEDDINGS_KEY = "embeddings.position_embeddings.weight"  # (max_len, D) = (512, 384)


def load_word_embeddings(directory: str | os.PathLike) -> torch.Tensor:
    """The token embedding table ``E`` of shape ``(vocab, D)``, read from ``model.safetensors``.

    Only this one tensor is read (safetensors maps the file and copies the slice it needs).
    """
    return _load_table(directory, WORD_EMBEDDINGS_KEY, "(vocab, D)")


def load_position_embeddings(directory: str | os.PathLike) -> torch.Tensor:
    """The model's *learned* position table, ``(P, D)`` with ``P = max_len``: row ``i`` is added
    to the token vector at position ``i`` (BERT-style models learn it instead of sinusoids)."""
    return _load_table(directory, POSITION_EMBEDDINGS_KEY, "(max_len, D)")


def _load_table(directory: str | os.PathLike, key: str, shape: str) -> torch.Tensor:
    directory = require_files(directory, ("model.safetensors",))
    with safe_open(directory / "model.safetensors", framework="pt") as tensors:
        if key not in tensors.keys():
            raise ValueError(f"{directory / 'model.safetensors'} holds no tensor {key!r}")
        table = tensors.get_tensor(key)  # 2-D
    if table.dim() != 2:
        raise ValueError(f"{key} must have shape {shape}, got {tuple(table.shape)}")
    return table


def lookup_by_index(table: torch.Tensor, ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """``E[ids]``: for every token ID, that row of the table (Vaswani et al. 2017, section 3.4).

    ``table`` is ``E``, ``(vocab, D)``; ``ids`` of any shape ``(...)`` give vectors ``(..., D)``.
    """
    check_table(table)
    ids = check_token_ids(ids, table.shape[0])
    return table[ids]  # (...) -> (..., D)


def lookup_by_one_hot(table: torch.Tensor, ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """``one_hot(ids) @ E``: the same rows, as a matrix product (what ``nn.Embedding`` means).

    A one-hot row has a single 1, so the product adds one row of ``E`` to zeros: the result is
    exactly ``E[ids]``, at the cost of ``vocab`` times more multiply-adds.
    """
    check_table(table)
    ids = check_token_ids(ids, table.shape[0])
    one_hot = F.one_hot(ids, num_classes=table.shape[0]).to(table.dtype)  # (...) -> (..., vocab)
    return one_hot @ table  # (..., vocab) @ (vocab, D) -> (..., D)


def embedding_module(table: torch.Tensor, padding_idx: int | None = None) -> nn.Embedding:
    """An ``nn.Embedding`` whose trainable weight is a copy of ``table``, ``(vocab, D)``."""
    check_table(table)
    return nn.Embedding.from_pretrained(
        table.detach().clone(), freeze=False, padding_idx=padding_idx
    )


def input_vectors(
    table: torch.Tensor,
    ids: torch.Tensor | Sequence[int],
    *,
    positions: torch.Tensor | None = None,
    scale_by_sqrt_d_model: bool = False,
) -> torch.Tensor:
    """``x_i = E(token_i) + PE(i)``: the token's row plus the encoding of position i.

    ``ids`` has shape ``(T,)`` or ``(B, T)``; the result ``(T, D)`` or ``(B, T, D)``. ``P`` is
    the sinusoidal table (``D`` must then be even: one sine and one cosine per frequency, see
    :mod:`transformer_tutorial.model.positions`) unless ``positions`` gives a learned table
    ``(max_len, D)``. The paper (section 3.4) also multiplies the embedding by
    ``sqrt(d_model)`` first; pass ``scale_by_sqrt_d_model=True`` for that.
    """
    check_table(table)
    ids = check_token_ids(ids, table.shape[0])
    if ids.dim() not in (1, 2):
        raise ValueError(f"ids must have shape (T,) or (B, T), got {tuple(ids.shape)}")
    length, d_model = ids.shape[-1], table.shape[1]
    vectors = table[ids]  # (T,) -> (T, D) or (B, T) -> (B, T, D)
    if scale_by_sqrt_d_model:
        vectors = vectors * math.sqrt(d_model)
    if positions is None:
        rows = torch.as_tensor(sinusoidal_encoding(length, d_model), dtype=table.dtype)  # (T, D)
    else:
        _check_positions(positions, length, d_model)
        rows = positions[:length]  # (max_len, D) -> (T, D)
    return vectors + rows  # (..., T, D) + (T, D) broadcasts over B


def _check_positions(positions: torch.Tensor, length: int, d_model: int) -> None:
    if positions.dim() != 2 or positions.shape[1] != d_model:
        raise ValueError(
            f"positions must have shape (max_len, {d_model}), got {tuple(positions.shape)}"
        )
    if positions.shape[0] < length:
        raise ValueError(f"positions has {positions.shape[0]} rows, fewer than T = {length}")
