"""What chapter 2 measures: a toy embedding table, one learned from scratch, and the real one.

Sources:

- Vaswani et al. (2017), section 3.4: learned embeddings turn tokens into vectors of
  dimension ``d_model``.
- Mikolov et al. (2013): the skip-gram objective (predict the words around a word), used here
  in its plain full-softmax form to show an embedding table being learned.

The "How Are You" example (one word = one token, ``d_model = 4``) is the one popular
explanations use. The real table is all-MiniLM-L6-v2's (:mod:`transformer_tutorial.model.files`).
Shapes use the package letters, ``D`` ``d_model``, plus ``vocab``, the vocabulary size (rows of
the table), and ``N``, a number of words or pairs.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from transformer_tutorial.model.checks import (
    check_positive_int,
    check_table,
    check_text,
    check_token_ids,
)
from transformer_tutorial.model.draws import normal
from transformer_tutorial.model.embeddings import lookup_by_index
from transformer_tutorial.model.tokens import single_token_id
from transformer_tutorial.studies.reproducible import reproducible_training

__all__ = [
    "HOW_ARE_YOU",
    "TOY_CORPUS",
    "TOY_VOCABULARY",
    "SkipGram",
    "SkipGramConfig",
    "SkipGramRun",
    "WorkedExample",
    "context_pairs",
    "cosine_similarity_matrix",
    "nearest_neighbours",
    "random_pair_cosines",
    "skip_gram_step",
    "toy_token_ids",
    "train_skip_gram",
    "word_similarities",
    "worked_example_table",
]


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
    unknown = [word for word in check_text(text).split() if word not in vocabulary]
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
    check_table(table)
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
    check_table(table)
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
    check_table(table)
    check_positive_int("pairs", pairs)
    pool = torch.arange(table.shape[0]) if candidates is None else torch.as_tensor(candidates)
    pool = check_token_ids(pool, table.shape[0])
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
        words = check_text(sentence, "every sentence").split()
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

    ``embedding`` ``E`` (vocab, D) is the table being learned; ``output`` ``W`` (vocab, D) scores
    every vocabulary word as a possible neighbour, ``scores = E(word) W^T``. Words seen in the same
    contexts must give the same predictions, which pushes their rows in the same direction.
    """

    def __init__(self, vocab_size: int, d_model: int, generator: torch.Generator | None = None):
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        # Both matrices are drawn here from ``generator``: nn.Embedding's and nn.Linear's own
        # constructors would draw from (and advance) PyTorch's global generator.
        table = normal((vocab_size, d_model), 1.0, generator)  # (vocab, D): N(0, 1)
        self.embedding = nn.Embedding.from_pretrained(table, freeze=False)  # (vocab, D)
        scale = d_model**-0.5  # scores start near 1 in size whatever d_model is
        self.output = nn.Parameter(normal((vocab_size, d_model), scale, generator))

    def forward(self, centre_ids: torch.Tensor) -> torch.Tensor:
        """``(N,)`` word IDs -> ``(N, vocab)`` scores (logits) for the word beside each one."""
        vectors = self.embedding(centre_ids)  # (N,) -> (N, D)
        return vectors @ self.output.T  # (N, D) @ (D, vocab) -> (N, vocab)


def skip_gram_step(model: SkipGram, pairs: torch.Tensor, learning_rate: float) -> torch.Tensor:
    """One step of plain full-batch gradient descent on the skip-gram loss; returns the loss.

    ``pairs`` ``(N, 2)`` holds (centre word, context word) IDs. After the step, the gradients
    stay in each parameter's ``.grad``.
    """
    scores = model(pairs[:, 0])  # (N,) centre words -> (N, vocab) scores for their neighbour
    loss = F.cross_entropy(scores, pairs[:, 1])  # the neighbour that was really there
    model.zero_grad()
    loss.backward()
    with torch.no_grad():  # plain SGD, written out (torch.optim takes seconds to import)
        for parameter in model.parameters():
            parameter -= learning_rate * parameter.grad  # E <- E - lr * d loss / d E, same for W
    return loss


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
    with reproducible_training(model):  # float64, one thread (see reproducible.py)
        for step in range(config.steps):
            loss = skip_gram_step(model, pairs, config.learning_rate)
            if step == 0:  # the gradients of the first step, still held in .grad
                first_gradient = model.embedding.weight.grad.detach().float()  # (vocab, D)
                first_output_gradient = model.output.grad.detach().float()  # (vocab, D)
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
