"""Contextual vectors: self-attention moves a word's vector toward the words it attends to.

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, equation (1) for the
attention, and section 3.1 for adding each sub-layer's output back to its input (the residual
connection of chapter "Add & Norm"):

    x'_t = x_t + sum_s softmax_s(q_t . k_s / sqrt(d_k)) v_s

A word has one *static* vector ``x_t`` (the embedding-table row, chapter "From text to vectors"),
whatever its sentence; after attention it has a *contextual* vector ``x'_t`` that depends on its
neighbours. "apple" among "juice" and "tree" is a different vector from "apple" among "mac" and
"os".

This module holds two tiny attention models that train on CPU in a few seconds, on synthetic
sentences made here (no downloads):

- the **apple model** (:func:`apple_corpus`): one layer, one head, ``d_model = 2`` so the
  embedding space *is* the picture. Each word must say whether its sentence is about fruit,
  technology or neither; "apple" is in all three kinds, so it can only answer by looking at its
  neighbours. Its values are the words' own vectors (no ``W_V``, no ``W_O``): the arrow from
  static to contextual then stays in the plane of the words.
- the **relations model** (:func:`relations_corpus`): two layers of two heads, ``d_model = 16``,
  learned positions. For "it" it must name the noun "it" refers to ("the cat sat on the mat
  because it was tired" -> cat; "... it was soft" -> mat); for a verb, its object; for a
  subject, its verb. Its weights fill the attention-heatmap explorer.

Both are :class:`ToyAttentionModel` s: embeddings (+ positions), ``n_layers`` attention layers
with residuals, and a linear readout. No LayerNorm and no feed-forward block: those come in later
chapters.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from transformer_tutorial.model.draws import normal
from transformer_tutorial.studies.reproducible import reproducible_training

__all__ = [
    "ANCHORS",
    "APPLE_PRESETS",
    "APPLE_VOCABULARY",
    "IGNORE",
    "PAD",
    "REFERENCE_POINTS",
    "RELATIONS_VOCABULARY",
    "RELATION_PRESETS",
    "TOPICS",
    "UNK",
    "Example",
    "ShiftMeasure",
    "ToyAttentionModel",
    "ToyConfig",
    "ToyOutput",
    "apple_config",
    "apple_corpus",
    "attention_scores",
    "attention_weights",
    "count_correct",
    "diagonal_share",
    "encode",
    "favours_self",
    "measure_shift",
    "relations_config",
    "relations_corpus",
    "run",
    "split_heads",
    "tokenize",
    "train_toy_model",
    "unseen",
]

PAD, UNK = "[PAD]", "[UNK]"
IGNORE = -100  # target of a token the loss skips (PyTorch's cross_entropy default)

# The reference picture that popular explanations draw (x, y), before any model is trained.
REFERENCE_POINTS = {
    "fruit": (0.5, 3.0),
    "tree": (1.5, 1.2),
    "juice": (2.5, 0.5),
    "mac": (6.0, 8.0),
    "os": (7.5, 7.5),
    "app": (8.0, 5.5),
    "apple": (4.5, 4.5),  # static; in a technology context it moves to (6.7, 6.5)
}
REFERENCE_TECH_CONTEXT = (6.7, 6.5)

# ---------------------------------------------------------------------------------------------
# Vocabularies and corpora

TOPICS = ("fruit", "technology", "neither")
_NEUTRAL = "i you she we the a my this like bought love want saw new big".split()
_FRUIT = "fruit tree juice pie ripe sweet orchard eat".split()
_TECH = "mac os app laptop phone software update install".split()
APPLE_VOCABULARY = (PAD, UNK, *_NEUTRAL, *_FRUIT, *_TECH, "apple")
ANCHORS = {"fruit": ("fruit", "tree", "juice"), "technology": ("mac", "os", "app")}
APPLE_PRESETS = {  # label -> sentence; each contains "apple"
    "fruit: i like the sweet apple juice": "i like the sweet apple juice",
    "fruit: she saw a ripe apple tree": "she saw a ripe apple tree",
    "technology: my new apple laptop os": "my new apple laptop os",
    "technology: install the apple app": "install the apple app",
    "ambiguous: i bought this apple": "i bought this apple",
    "ambiguous: apple juice app": "apple juice app",
}

_ANIMALS = "cat dog bird child".split()
_THINGS = "mat rug box sofa".split()
_ANIMAL_ADJECTIVES = "tired hungry sleepy scared".split()
_THING_ADJECTIVES = "soft warm clean dirty".split()
_SUBJECTS = "i we they you".split()
_OBJECTS = {
    "eat": "pizza pasta bread cake".split(),
    "drink": "tea coffee milk juice".split(),
    "read": "books news poems letters".split(),
}
_PREPOSITIONS = "on under near".split()
RELATIONS_VOCABULARY = (
    PAD,
    UNK,
    *"the sat because it was want to often".split(),
    *_ANIMALS,
    *_THINGS,
    *_ANIMAL_ADJECTIVES,
    *_THING_ADJECTIVES,
    *_SUBJECTS,
    *_OBJECTS,
    *(word for objects in _OBJECTS.values() for word in objects),
    *_PREPOSITIONS,
)
RELATION_PRESETS = {
    "it -> cat: the cat sat on the mat because it was tired": (
        "the cat sat on the mat because it was tired"
    ),
    "it -> mat: the cat sat on the mat because it was soft": (
        "the cat sat on the mat because it was soft"
    ),
    "eat -> pizza: i want to eat pizza": "i want to eat pizza",
    "drink -> tea: they often drink tea": "they often drink tea",
    "it -> dog: the dog sat near the box because it was hungry": (
        "the dog sat near the box because it was hungry"
    ),
}


@dataclass
class Example:
    """One training sentence: its words and one target per word (IGNORE: no target)."""

    words: list[str]
    targets: list[int]


def tokenize(sentence: str) -> list[str]:
    """Lower-case and split on whitespace: the toy models' whole tokenizer."""
    words = sentence.lower().split()
    if not words:
        raise ValueError(f"sentence has no words: {sentence!r}")
    return words


def encode(words: Sequence[str], vocabulary: Sequence[str]) -> list[int]:
    """Word -> row of the embedding table; words outside the vocabulary share [UNK]'s row."""
    index = {word: position for position, word in enumerate(vocabulary)}
    return [index.get(word, index[UNK]) for word in words]


def apple_corpus(n_sentences: int, seed: int) -> list[Example]:
    """Sentences about fruit, technology or neither; every word's target is the topic's index.

    A sentence has 1-3 neutral words, 1-2 topic words (none for "neither") and, 60% of the time,
    "apple", shuffled. "apple" and the neutral words appear under every topic, so only their
    neighbours tell the topic.
    """
    rng = np.random.default_rng(seed)
    examples = []
    for _ in range(n_sentences):
        topic = int(rng.integers(len(TOPICS)))
        words = list(rng.choice(_NEUTRAL, size=rng.integers(1, 4)))
        if topic < 2:
            words += list(rng.choice((_FRUIT, _TECH)[topic], size=rng.integers(1, 3)))
        if rng.random() < 0.6:
            words.append("apple")
        rng.shuffle(words)
        examples.append(Example([str(word) for word in words], [topic] * len(words)))
    return examples


def relations_corpus(n_sentences: int, seed: int) -> list[Example]:
    """Half coreference sentences, half subject-verb-object; targets are vocabulary indices.

    - "the {animal} sat {on} the {thing} because it was {adjective}": "it" must name the animal
      when the adjective suits an animal (tired, hungry, ...), the thing otherwise (soft, ...).
    - "{subject} [want to | often] {verb} {object}": the subject names its verb, the verb its
      object.

    Every other word has no target (IGNORE).
    """
    rng = np.random.default_rng(seed)
    index = {word: position for position, word in enumerate(RELATIONS_VOCABULARY)}
    examples = []
    for _ in range(n_sentences):
        if rng.random() < 0.5:
            animal, thing = str(rng.choice(_ANIMALS)), str(rng.choice(_THINGS))
            animate = bool(rng.random() < 0.5)
            adjective = str(rng.choice(_ANIMAL_ADJECTIVES if animate else _THING_ADJECTIVES))
            preposition = str(rng.choice(_PREPOSITIONS))
            words = ["the", animal, "sat", preposition, "the", thing, "because", "it", "was"]
            words.append(adjective)
            targets = [IGNORE] * len(words)
            targets[7] = index[animal if animate else thing]
        else:
            subject, verb = str(rng.choice(_SUBJECTS)), str(rng.choice(list(_OBJECTS)))
            middle = rng.random()
            extra = ["want", "to"] if middle < 0.3 else ["often"] if middle < 0.5 else []
            words = [subject, *extra, verb, str(rng.choice(_OBJECTS[verb]))]
            targets = [IGNORE] * len(words)
            targets[0] = index[verb]
            targets[len(extra) + 1] = index[words[-1]]
        examples.append(Example(words, targets))
    return examples


# ---------------------------------------------------------------------------------------------
# The model


@dataclass
class ToyConfig:
    """A tiny attention-only model: embeddings, attention layers with residuals, a readout."""

    vocabulary: tuple[str, ...]  # row i of the embedding table is vocabulary[i]; [PAD], [UNK] first
    n_outputs: int  # classes of the readout
    d_model: int = 2  # D: width of every token vector
    n_layers: int = 1  # attention layers, each added to its input (residual)
    n_heads: int = 1  # H: heads per layer; d_k = D // H
    value_projection: bool = False  # False: each word hands over its own vector (W_V = I, no W_O)
    max_len: int | None = None  # learned positions for up to this many tokens; None: no positions
    initial_points: dict[str, tuple[float, ...]] = field(default_factory=dict)  # start vectors

    def __post_init__(self) -> None:
        if self.vocabulary[:2] != (PAD, UNK):
            raise ValueError(f"vocabulary must start with {PAD!r}, {UNK!r}")
        if len(set(self.vocabulary)) != len(self.vocabulary):
            raise ValueError("vocabulary has repeated words")
        if self.d_model < 1 or self.n_layers < 1 or self.n_heads < 1 or self.n_outputs < 1:
            raise ValueError("d_model, n_layers, n_heads and n_outputs must be positive")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads={self.n_heads} must divide d_model={self.d_model} (d_k = D // H)"
            )
        if not self.value_projection and self.n_heads != 1:
            raise ValueError(
                "without a value projection each word hands over its whole vector: use n_heads=1"
            )
        for word, point in self.initial_points.items():
            if word not in self.vocabulary or len(point) != self.d_model:
                raise ValueError(
                    f"initial_points[{word!r}] must be a vocabulary word with {self.d_model} "
                    f"coordinates, got {point}"
                )


@dataclass
class ToyOutput:
    logits: torch.Tensor  # (B, T, n_outputs)
    states: list[torch.Tensor]  # n_layers + 1 tensors (B, T, D): the input, then after each layer
    weights: torch.Tensor  # (B, n_layers, H, T, T)


class ToyAttentionLayer(nn.Module):
    """One layer of the toy models: ``x + Attention(x W_Q, x W_K, x W_V) W_O`` over ``H`` heads.

    Equation (1) of the paper (section 3.2.1) for every head, the heads side by side (section
    3.2.2), and the layer's input added back to its output (the residual of section 3.1). With
    ``value_projection=False`` (the apple model) there is no ``W_V`` and no ``W_O``: each word
    hands over its own vector, so the move it makes stays in the plane of the words.
    """

    def __init__(self, config: ToyConfig):
        super().__init__()
        d_model = config.d_model
        self.n_heads = config.n_heads
        self.W_Q = nn.Linear(d_model, d_model)  # (D, D) and a bias: all heads' queries at once
        self.W_K = nn.Linear(d_model, d_model)  # (D, D) and a bias: all heads' keys
        self.W_V = nn.Linear(d_model, d_model) if config.value_projection else None
        self.W_O = nn.Linear(d_model, d_model) if config.value_projection else None

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` ``(B, T, D)``; ``padding`` ``(B, T)``, True at [PAD].

        Returns the new vectors ``(B, T, D)`` and the attention weights ``(B, H, T, T)``.
        """
        batch, length, width = x.shape  # (B, T, D)
        d_k = width // self.n_heads
        queries = split_heads(self.W_Q(x), self.n_heads)  # (B, T, D) -> (B, H, T, K)
        keys = split_heads(self.W_K(x), self.n_heads)  # (B, T, D) -> (B, H, T, K)
        values = x if self.W_V is None else self.W_V(x)  # (B, T, D)
        values = split_heads(values, self.n_heads)  # (B, T, D) -> (B, H, T, K)
        scores = queries @ keys.transpose(-1, -2) / d_k**0.5  # (B, H, T, K) @ (B, H, K, T)
        pad_keys = padding[:, None, None, :]  # (B, T) -> (B, 1, 1, T): alike for heads, queries
        scores = scores.masked_fill(pad_keys, float("-inf"))  # no weight on [PAD] keys
        weights = scores.softmax(dim=-1)  # (B, H, T, T), rows sum to 1
        mixed = weights @ values  # (B, H, T, T) @ (B, H, T, K) -> (B, H, T, K)
        mixed = mixed.transpose(1, 2).reshape(batch, length, width)  # -> (B, T, H, K) -> (B, T, D)
        if self.W_O is not None:
            mixed = self.W_O(mixed)  # (B, T, D) -> (B, T, D)
        return x + mixed, weights  # the residual: each word moves by what it took in


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Cut each token's vector into ``H`` slices of width ``K = D // H``, one per head.

    ``(B, T, D) -> (B, T, H, K) -> (B, H, T, K)``: each head then sees its own ``(T, K)`` matrix.
    """
    batch, length, width = x.shape
    return x.view(batch, length, n_heads, width // n_heads).transpose(1, 2)


class ToyAttentionModel(nn.Module):
    """Embeddings (+ learned positions), ``n_layers`` :class:`ToyAttentionLayer` s, a readout."""

    def __init__(self, config: ToyConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(len(config.vocabulary), config.d_model)  # (vocab, D)
        self.positions = (
            nn.Embedding(config.max_len, config.d_model) if config.max_len is not None else None
        )
        self.layers = nn.ModuleList(ToyAttentionLayer(config) for _ in range(config.n_layers))
        self.readout = nn.Linear(config.d_model, config.n_outputs)
        generator = torch.Generator().manual_seed(0) if generator is None else generator
        with torch.no_grad():
            for parameter in self.parameters():
                if parameter.ndim == 2:
                    bound = 1 / parameter.shape[1] ** 0.5
                    parameter.copy_(torch.rand(parameter.shape, generator=generator) * 2 - 1)
                    parameter.mul_(bound)
                else:
                    parameter.zero_()
            self.embedding.weight.copy_(normal(self.embedding.weight.shape, 0.3, generator))
            for word, point in config.initial_points.items():
                self.embedding.weight[config.vocabulary.index(word)] = torch.tensor(point)

    def forward(self, ids: torch.Tensor) -> ToyOutput:
        """``ids`` (B, T) of vocabulary rows, padded with 0 ([PAD]) on the right."""
        if ids.ndim != 2 or 0 in ids.shape:
            raise ValueError(f"ids must have shape (B, T) with B, T > 0, got {tuple(ids.shape)}")
        padding = ids == 0  # (B, T), True at [PAD]
        x = self.embedding(ids)  # (B, T) -> (B, T, D)
        if self.positions is not None:
            if ids.shape[1] > self.positions.num_embeddings:
                raise ValueError(
                    f"sentence of {ids.shape[1]} tokens is longer than the position table "
                    f"({self.positions.num_embeddings})"
                )
            x = x + self.positions(torch.arange(ids.shape[1]))  # (B, T, D) + (T, D)
        states, weights = [x], []
        for layer in self.layers:
            x, layer_weights = layer(x, padding)
            states.append(x)
            weights.append(layer_weights)
        return ToyOutput(self.readout(x), states, torch.stack(weights, dim=1))  # (B, L, H, T, T)


def _batch(examples: Sequence[Example], vocabulary: Sequence[str]):
    length = max(len(example.words) for example in examples)
    ids = torch.zeros(len(examples), length, dtype=torch.long)  # (B, T), 0 = [PAD]
    targets = torch.full((len(examples), length), IGNORE)  # (B, T)
    for row, example in enumerate(examples):
        ids[row, : len(example.words)] = torch.tensor(encode(example.words, vocabulary))
        targets[row, : len(example.targets)] = torch.tensor(example.targets)
    return ids, targets


def train_toy_model(
    config: ToyConfig,
    examples: Sequence[Example],
    *,
    steps: int,
    learning_rate: float,
    weight_decay: float = 0.0,
    seed: int = 0,
) -> tuple[ToyAttentionModel, list[float]]:
    """Full-batch AdamW on cross-entropy over every word with a target. Returns (model, losses)."""
    if not examples:
        raise ValueError("examples is empty")
    for example in examples:
        if len(example.words) != len(example.targets):
            raise ValueError(f"{example.words}: one target per word needed")
    model = ToyAttentionModel(config, torch.Generator().manual_seed(seed))
    ids, targets = _batch(examples, config.vocabulary)
    losses = []
    with reproducible_training(model):  # float64, one thread (see reproducible.py)
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=learning_rate, weight_decay=weight_decay
        )
        for _ in range(steps):
            logits = model(ids).logits  # (B, T, n_outputs)
            loss = nn.functional.cross_entropy(
                logits.reshape(-1, config.n_outputs), targets.reshape(-1), ignore_index=IGNORE
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    model.eval()
    return model, losses


def apple_config() -> ToyConfig:
    """The apple model; its six anchor words and "apple" start at the reference picture."""
    centre = np.array(REFERENCE_POINTS["apple"])
    start = {
        word: tuple(float(value) for value in (np.array(point) - centre) / 3)
        for word, point in REFERENCE_POINTS.items()
    }
    return ToyConfig(APPLE_VOCABULARY, n_outputs=len(TOPICS), initial_points=start)


def relations_config() -> ToyConfig:
    return ToyConfig(
        RELATIONS_VOCABULARY,
        n_outputs=len(RELATIONS_VOCABULARY),
        d_model=16,
        n_layers=2,
        n_heads=2,
        value_projection=True,
        max_len=12,
    )


# ---------------------------------------------------------------------------------------------
# Reading a trained model


def run(model: ToyAttentionModel, sentence: str) -> tuple[list[str], ToyOutput]:
    """Tokenize ``sentence`` and run the model on it (batch of one, no gradients)."""
    words = tokenize(sentence)
    ids = torch.tensor([encode(words, model.config.vocabulary)])  # (1, T)
    with torch.no_grad():
        return words, model(ids)


def count_correct(model: ToyAttentionModel, examples: Sequence[Example]) -> tuple[int, int]:
    """How many of the words with a target the model answers right: ``(right, total)``."""
    right = total = 0
    for example in examples:
        _, output = run(model, " ".join(example.words))
        predicted = output.logits[0].argmax(dim=-1).tolist()  # (T,): the best class per word
        for guess, target in zip(predicted, example.targets, strict=True):
            if target != IGNORE:
                right, total = right + (guess == target), total + 1
    return right, total


def unseen(examples: Sequence[Example], training: Sequence[Example]) -> list[Example]:
    """The examples whose sentence is not word for word a training sentence (repeats kept once).

    The synthetic corpora draw from small word lists, so two seeds share many sentences: a test
    set is held out only after this filter.
    """
    seen = {tuple(example.words) for example in training}
    kept, fresh = [], set()
    for example in examples:
        words = tuple(example.words)
        if words not in seen and words not in fresh:
            kept.append(example)
            fresh.add(words)
    return kept


def attention_weights(model: ToyAttentionModel, sentence: str) -> tuple[list[str], np.ndarray]:
    """The words and every layer's and head's weights, shape (layers, heads, T, T)."""
    words, output = run(model, sentence)
    return words, output.weights[0].numpy().astype(float)  # (1, L, H, T, T) -> (L, H, T, T)


def attention_scores(model: ToyAttentionModel, sentence: str) -> tuple[list[str], np.ndarray]:
    """The words and every layer's and head's scores *before* the softmax, ``q . k / sqrt(d_k)``.

    Shape ``(layers, heads, T, T)``; row ``t``'s softmax is row ``t`` of
    :func:`attention_weights`. Unlike the weights, the scores are not normalised row by row, so
    ``scores[l, h, i, j]`` and ``scores[l, h, j, i]`` compare how much ``i`` seeks ``j`` with
    how much ``j`` seeks ``i``.
    """
    words, output = run(model, sentence)
    scores = []
    with torch.no_grad():
        for layer, x in zip(model.layers, output.states, strict=False):  # x: the layer's input
            queries = split_heads(layer.W_Q(x), layer.n_heads)  # (1, T, D) -> (1, H, T, K)
            keys = split_heads(layer.W_K(x), layer.n_heads)  # (1, T, D) -> (1, H, T, K)
            d_k = queries.shape[-1]
            scores.append(queries @ keys.transpose(-1, -2) / d_k**0.5)  # (1, H, T, T)
    return words, torch.cat(scores).numpy().astype(float)  # (L, H, T, T)


def favours_self(weights: np.ndarray) -> np.ndarray:
    """For each query row of ``weights`` ``(..., T, T)``: is its largest weight on the token
    itself? A tie counts as not. Returns booleans ``(..., T)``."""
    weights = np.asarray(weights, dtype=float)
    if weights.ndim < 2 or weights.shape[-1] != weights.shape[-2] or weights.shape[-1] == 0:
        raise ValueError(f"weights must have shape (..., T, T) with T > 0, got {weights.shape}")
    length = weights.shape[-1]
    diagonal = weights[..., np.arange(length), np.arange(length)]  # (..., T)
    others = np.where(np.eye(length, dtype=bool), -np.inf, weights).max(axis=-1)  # (..., T)
    return diagonal > others  # with T = 1 there are no others: the row favours itself


def diagonal_share(weights: np.ndarray) -> float:
    """Share of query rows whose largest weight is on the token itself (ties count as not).

    ``weights`` has shape (..., T, T). "Every token attends most to itself" would make this 1.
    """
    return float(favours_self(weights).mean())


@dataclass
class ShiftMeasure:
    """Where one word's vector is before and after attention, and how far from each cluster."""

    words: list[str]
    position: int  # of the word in the sentence
    static: np.ndarray  # (D,) the embedding-table row
    trajectory: np.ndarray  # (n_layers + 1, D): the input, then after each layer
    attention: np.ndarray  # (T,) the word's weights over the sentence (last layer, head 1)
    before: dict[str, float]  # cluster -> distance from the static vector to its centroid
    after: dict[str, float]  # cluster -> distance from the contextual vector to its centroid

    @property
    def contextual(self) -> np.ndarray:
        return self.trajectory[-1]


def measure_shift(
    model: ToyAttentionModel,
    sentence: str,
    word: str = "apple",
    anchors: dict[str, Sequence[str]] = ANCHORS,
) -> ShiftMeasure:
    """Run ``sentence`` and measure ``word``'s move against the centroids of ``anchors``'
    *static* vectors (the first occurrence of ``word`` counts)."""
    words, output = run(model, sentence)
    if word not in words:
        raise ValueError(f"{word!r} is not in the sentence {sentence!r}")
    position = words.index(word)
    table = model.embedding.weight.detach().numpy().astype(float)  # (vocab, D)
    centroids = {
        name: table[encode(members, model.config.vocabulary)].mean(axis=0)  # (D,)
        for name, members in anchors.items()
    }
    trajectory = np.stack([state[0, position].numpy().astype(float) for state in output.states])
    static = trajectory[0]
    return ShiftMeasure(
        words=words,
        position=position,
        static=static,
        trajectory=trajectory,
        attention=output.weights[0, -1, 0, position].numpy().astype(float),
        before={name: float(np.linalg.norm(static - c)) for name, c in centroids.items()},
        after={name: float(np.linalg.norm(trajectory[-1] - c)) for name, c in centroids.items()},
    )
