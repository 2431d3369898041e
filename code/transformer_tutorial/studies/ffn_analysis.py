"""What the position-wise feed-forward network adds to attention, measured.

Sources: Vaswani et al. (2017), section 3.3 (the FFN is "applied to each position separately
and identically") and section 3.2.1 (attention is a softmax-weighted sum of values). Chapter
"Feed-forward network" uses this module to test a popular claim, "attention alone is linear":

- :func:`homogeneity_gap` and :func:`additivity_gap` measure how far any function is from
  linear (both are 0 for a linear map);
- :func:`convex_hull` and :func:`inside_convex_polygon` check that one head's outputs, being
  convex combinations of its values, never leave the values' convex hull;
- the **token-table task** asks for a boolean function of each token's own features (XOR of
  two features, or a random lookup table), the same function at every position.
  :class:`TokenMixer` is a stack of attention layers with residual connections, with or without
  a feed-forward network after each; :func:`train_token_model` trains it in about a second;
  :func:`accuracy_alone` asks for the answer for a token that has no other tokens to look at;
- the **sentence task** ("the cat sleeps" -> is that plausible?) trains the book's own
  :class:`~transformer_tutorial.model.transformer.EncoderOnly`; :func:`feed_forward_trace` records
  what the FFN receives and adds at every position, and :func:`yes_probability` can skip the
  FFN to see what its update decides.

The models leave LayerNorm out of the token-table task on purpose: LayerNorm divides each
vector by its own spread, a per-token nonlinearity of its own (chapter 6), which would blur
what attention and the FFN each contribute.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import nn

from transformer_tutorial.model.attention import linear
from transformer_tutorial.model.checks import check_positive_int
from transformer_tutorial.model.feed_forward import FeedForward, FeedForwardConfig
from transformer_tutorial.model.multi_head import MultiHeadAttention, MultiHeadConfig
from transformer_tutorial.model.optim import Adam
from transformer_tutorial.model.transformer import EncoderOnly, TransformerConfig
from transformer_tutorial.studies.reproducible import reproducible_training

__all__ = [
    "ANIMALS",
    "PLAUSIBLE",
    "VERBS",
    "WORDS",
    "FeedForwardTrace",
    "SentenceConfig",
    "TokenMixer",
    "TokenTaskConfig",
    "Training",
    "accuracy_alone",
    "additivity_gap",
    "all_patterns",
    "convex_hull",
    "feed_forward_trace",
    "homogeneity_gap",
    "inside_convex_polygon",
    "predictions_alone",
    "self_weight_by_target",
    "sentence_data",
    "token_accuracy",
    "token_batch",
    "train_sentence_model",
    "train_token_model",
    "truth_table",
    "yes_probability",
]


# --- How far from linear -------------------------------------------------------------------


def _relative(difference: torch.Tensor, reference: torch.Tensor) -> float:
    norm = float(reference.norm())
    if norm == 0.0:
        raise ValueError("the reference output is zero: a relative gap is undefined")
    return float(difference.norm()) / norm


@torch.no_grad()
def homogeneity_gap(
    function: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, scale: float
) -> float:
    """``|f(a x) - a f(x)| / |a f(x)|`` for ``a = scale``: 0 for every linear ``f``."""
    if not np.isfinite(scale) or scale == 0:
        raise ValueError(f"scale must be finite and non-zero, got {scale}")
    expected = scale * function(x)
    return _relative(function(scale * x) - expected, expected)


@torch.no_grad()
def additivity_gap(
    function: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> float:
    """``|f(x + y) - f(x) - f(y)| / |f(x) + f(y)|``: 0 for every linear ``f``."""
    if x.shape != y.shape:
        raise ValueError(
            f"x and y must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    expected = function(x) + function(y)
    return _relative(function(x + y) - expected, expected)


# --- Convex hulls (one head's outputs stay inside its values' hull) -------------------------


def _cross(origin: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """z-component of ``(a - origin) x (b - origin)``: > 0 when ``b`` is left of ``origin -> a``."""
    return (a[..., 0] - origin[..., 0]) * (b[..., 1] - origin[..., 1]) - (
        a[..., 1] - origin[..., 1]
    ) * (b[..., 0] - origin[..., 0])


def convex_hull(points: np.ndarray) -> np.ndarray:
    """Corners of the convex hull of ``points`` ``(N, 2)``, counter-clockwise: ``(M, 2)``.

    Andrew's monotone chain: sort by x, then build the lower and upper chains, dropping every
    point that would make a clockwise (or straight) turn.
    """
    points = np.asarray(points, dtype=float)
    if points.ndim != 2 or points.shape[1] != 2 or len(points) < 3:
        raise ValueError(f"points must have shape (N, 2) with N >= 3, got {points.shape}")
    ordered = points[np.lexsort((points[:, 1], points[:, 0]))]  # by x, then y
    chains = []
    for sequence in (ordered, ordered[::-1]):  # lower chain, then upper chain
        chain: list[np.ndarray] = []
        for point in sequence:
            while len(chain) >= 2 and _cross(chain[-2], chain[-1], point) <= 0:
                chain.pop()
            chain.append(point)
        chains.append(chain[:-1])  # the last point starts the other chain
    hull = np.array(chains[0] + chains[1])  # (M, 2)
    if len(hull) < 3:
        raise ValueError("the points lie on one line: their hull has no area")
    return hull


def inside_convex_polygon(
    points: np.ndarray, polygon: np.ndarray, tolerance: float = 1e-9
) -> np.ndarray:
    """For each of ``points`` ``(P, 2)``: is it inside (or on) the convex ``polygon``
    ``(M, 2)`` given counter-clockwise, as :func:`convex_hull` returns it? Returns ``(P,)``."""
    points, polygon = np.asarray(points, dtype=float), np.asarray(polygon, dtype=float)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"points must have shape (P, 2), got {points.shape}")
    if polygon.ndim != 2 or polygon.shape[1] != 2 or len(polygon) < 3:
        raise ValueError(f"polygon must have shape (M, 2) with M >= 3, got {polygon.shape}")
    starts, ends = polygon, np.roll(polygon, -1, axis=0)  # (M, 2): the M edges
    sides = _cross(starts[None], ends[None], points[:, None])  # (P, M): left of each edge > 0
    return np.all(sides >= -tolerance, axis=1)


# --- The token-table task: a function of each token's own features ------------------------


@dataclass
class TokenTaskConfig:
    """The task, the model and the training run; the defaults are the chapter's XOR model."""

    bits: int = 2  # features per token, each -1 or +1 (2**bits possible tokens)
    table: Literal["parity", "random"] = "parity"  # parity: XOR for 2 bits; random: a lookup
    table_seed: int = 1  # which random table (only for table="random")
    length: int = 8  # tokens per training sequence
    d_model: int = 16  # width of the token vectors
    num_heads: int = 2  # heads per attention layer
    num_layers: int = 1  # attention layers (each followed by an FFN if feed_forward)
    feed_forward: bool = True  # False: attention only
    d_ff: int = 32  # FFN hidden width (32 makes 1 layer + FFN as big as 2 attention layers)
    steps: int = 150  # optimiser steps
    batch_size: int = 32  # sequences per step
    learning_rate: float = 1e-2  # Adam
    seed: int = 0  # initial weights and training data

    def __post_init__(self) -> None:
        for name in ("bits", "length", "d_ff", "num_layers", "steps", "batch_size"):
            check_positive_int(name, getattr(self, name))
        if self.bits > 12:
            raise ValueError(
                f"bits must be at most 12 (a table of 2**bits entries), got {self.bits}"
            )
        if self.table not in ("parity", "random"):
            raise ValueError(f"table must be 'parity' or 'random', got {self.table!r}")
        MultiHeadConfig(self.d_model, self.num_heads)  # heads must divide d_model


def all_patterns(bits: int) -> torch.Tensor:
    """Every token there is: ``(2**bits, bits)``, row ``i`` holds +1 where bit ``b`` of ``i``
    is set and -1 elsewhere."""
    check_positive_int("bits", bits)
    index = torch.arange(2**bits)[:, None]  # (N, 1)
    set_bits = (index >> torch.arange(bits)) & 1  # (N, bits)
    return torch.where(set_bits == 1, 1.0, -1.0)  # in the default dtype


def truth_table(config: TokenTaskConfig) -> torch.Tensor:
    """The answer (0 or 1) for each of the ``2**bits`` patterns of :func:`all_patterns`."""
    index = torch.arange(2**config.bits)[:, None]  # (N, 1)
    if config.table == "parity":
        return (((index >> torch.arange(config.bits)) & 1).sum(dim=1) % 2).long()  # (N,)
    generator = torch.Generator().manual_seed(config.table_seed)
    return torch.randint(0, 2, (2**config.bits,), generator=generator)  # (N,)


def token_batch(
    config: TokenTaskConfig, batch_size: int, length: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` sequences of ``length`` random tokens: features ``(B, T, bits)`` and the
    answer for every token ``(B, T)``."""
    check_positive_int("batch_size", batch_size)
    check_positive_int("length", length)
    index = torch.randint(0, 2**config.bits, (batch_size, length), generator=generator)  # (B, T)
    features = all_patterns(config.bits)[index]  # (N, bits)[(B, T)] -> (B, T, bits)
    return features, truth_table(config)[index]  # (B, T, bits), (B, T)


class TokenMixer(nn.Module):
    """Features ``(B, T, bits)`` -> a linear map to ``D`` -> ``num_layers`` x [``x + MHA(x)``,
    then ``x + FFN(x)`` if ``feed_forward``] -> a linear read-out to two logits per token.

    No positions (the answer of a token does not depend on where it stands) and no LayerNorm
    (see the module docstring). Without the FFN, the only nonlinear step is attention's softmax.
    """

    def __init__(self, config: TokenTaskConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        d_model = config.d_model
        self.embed = linear(config.bits, d_model, bias=True, generator=generator)
        self.attention = nn.ModuleList(
            MultiHeadAttention(MultiHeadConfig(d_model, config.num_heads), generator=generator)
            for _ in range(config.num_layers)
        )
        self.feed_forward = (
            nn.ModuleList(
                FeedForward(FeedForwardConfig(d_model, config.d_ff), generator=generator)
                for _ in range(config.num_layers)
            )
            if config.feed_forward
            else None
        )
        self.readout = linear(d_model, 2, bias=True, generator=generator)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``features`` ``(B, T, bits)`` -> logits ``(B, T, 2)`` and every layer's attention
        weights, ``num_layers`` x ``(B, H, T, T)``."""
        bits = self.config.bits
        if features.dim() != 3 or features.shape[-1] != bits or 0 in features.shape:
            raise ValueError(
                f"features must have shape (B, T, {bits}) with B, T >= 1, "
                f"got {tuple(features.shape)}"
            )
        x = self.embed(features)  # (B, T, bits) -> (B, T, D)
        weights = []
        for index, attention in enumerate(self.attention):
            mixed, layer_weights = attention(x)  # (B, T, D), (B, H, T, T)
            x = x + mixed
            weights.append(layer_weights)
            if self.feed_forward is not None:
                x = x + self.feed_forward[index](x)  # (B, T, D)
        return self.readout(x), weights  # (B, T, D) -> (B, T, 2)


@dataclass
class Training:
    """A trained model and its training loss after each step."""

    model: nn.Module
    losses: list[float] = field(default_factory=list)


def train_token_model(config: TokenTaskConfig) -> Training:
    """Train a fresh :class:`TokenMixer` with Adam on fresh random sequences (seeded, CPU; in
    float64 on one thread: see :mod:`~transformer_tutorial.studies.reproducible`)."""
    generator = torch.Generator().manual_seed(config.seed)
    model = TokenMixer(config, generator=generator)
    training = Training(model)
    with reproducible_training(model):
        optimiser = Adam(model.parameters(), lr=config.learning_rate)  # = torch.optim.Adam
        for _ in range(config.steps):
            features, targets = token_batch(config, config.batch_size, config.length, generator)
            logits, _ = model(features)  # (B, T, 2)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 2), targets.reshape(-1))
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            training.losses.append(loss.item())
    model.eval()
    return training


def token_accuracy(
    model: TokenMixer, length: int | None = None, batch_size: int = 256, seed: int = 12345
) -> float:
    """Fraction of tokens answered right in fresh sequences of ``length`` tokens (default:
    the training length)."""
    config = model.config
    generator = torch.Generator().manual_seed(seed)
    features, targets = token_batch(config, batch_size, length or config.length, generator)
    logits, _ = model(features)  # (B, T, 2)
    return float((logits.argmax(dim=-1) == targets).float().mean())


@torch.no_grad()
def predictions_alone(model: TokenMixer) -> torch.Tensor:
    """The answer for each possible token when it is the whole sequence (``T = 1``): ``(N,)``
    in the order of :func:`all_patterns`. With one key, every attention weight is 1, so
    attention can only pass the token's own value through: the model without an FFN is then
    an affine map of the features."""
    patterns = all_patterns(model.config.bits)[:, None, :]  # (N, bits) -> (N, 1, bits)
    logits, _ = model(patterns)  # (N, 1, 2)
    return logits[:, 0].argmax(dim=-1)  # (N,)


def accuracy_alone(model: TokenMixer) -> float:
    """Fraction of the ``2**bits`` tokens answered right when each stands alone."""
    return float((predictions_alone(model) == truth_table(model.config)).float().mean())


@torch.no_grad()
def self_weight_by_target(
    model: TokenMixer, layer: int = 0, batch_size: int = 256, seed: int = 12345
) -> np.ndarray:
    """How much weight a token puts on *itself*, averaged separately over tokens whose answer
    is 0 and 1: ``(H, 2)`` for attention layer ``layer``. Equal columns mean attention's
    weights carry no information about the answer."""
    config = model.config
    if not 0 <= layer < config.num_layers:
        raise ValueError(f"layer must be in [0, {config.num_layers}), got {layer}")
    generator = torch.Generator().manual_seed(seed)
    features, targets = token_batch(config, batch_size, config.length, generator)
    _, weights = model(features)
    on_self = weights[layer].diagonal(dim1=-2, dim2=-1)  # (B, H, T, T) -> (B, H, T)
    columns = []
    for answer in (0, 1):
        chosen = (targets == answer)[:, None, :].float()  # (B, 1, T)
        columns.append((on_self * chosen).sum(dim=(0, 2)) / chosen.sum())  # (H,)
    return torch.stack(columns, dim=1).numpy()  # (H, 2)


# --- The sentence task: "the cat sleeps" -> plausible? -------------------------------------

WORDS = (  # the vocabulary of the sentence task: a word's token ID is its index here
    "[PAD]", "the", "cat", "dog", "fish", "bird", "sleeps", "eats", "swims", "flies", "yes", "no",
)  # fmt: skip
ANIMALS = ("cat", "dog", "fish", "bird")
VERBS = ("sleeps", "eats", "swims", "flies")
PLAUSIBLE = np.array(  # rows ANIMALS, columns VERBS: 1 = a plausible sentence
    [
        [1, 1, 0, 0],  # cat: sleeps, eats
        [1, 1, 1, 0],  # dog: sleeps, eats, swims
        [0, 1, 1, 0],  # fish: eats, swims
        [1, 1, 0, 1],  # bird: sleeps, eats, flies
    ]
)
# No sum "animal score + verb score" reproduces this table (cat/fish x sleeps/swims is an XOR),
# so the answer needs the animal and the verb together, not each on its own.


def sentence_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The 16 sentences "the <animal> <verb>" as IDs ``(16, 3)``, animal-major, and the ID of
    the answer word ("yes" or "no") expected at the verb ``(16,)``."""
    ids = torch.tensor(
        [[WORDS.index("the"), WORDS.index(a), WORDS.index(v)] for a in ANIMALS for v in VERBS]
    )  # (16, 3)
    answers = torch.tensor(
        [WORDS.index("yes") if plausible else WORDS.index("no") for plausible in PLAUSIBLE.flat]
    )  # (16,)
    return ids, answers


@dataclass
class SentenceConfig:
    """The sentence model (a one-layer encoder from transformer.py) and its training run."""

    d_model: int = 16  # width of the token vectors
    num_heads: int = 2  # attention heads
    d_ff: int | None = None  # FFN hidden width; None: 4 x d_model
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN as in GPT-2
    steps: int = 100  # full-batch Adam steps over the 16 sentences
    learning_rate: float = 3e-2  # Adam
    seed: int = 0  # initial weights

    def transformer_config(self) -> TransformerConfig:
        """The :class:`TransformerConfig` of the encoder: one layer, learned positions, no
        dropout, an output layer over :data:`WORDS` of its own."""
        return TransformerConfig(
            kind="encoder-only",
            vocab_size=len(WORDS),
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            num_layers=1,
            max_length=3,
            positional="learned",
            norm_first=self.norm_first,
            dropout=0.0,
            scale_embeddings=False,
            tie_embeddings=False,
        )


def train_sentence_model(config: SentenceConfig) -> Training:
    """Train the encoder to answer "yes" or "no" at the verb of each of the 16 sentences."""
    model_config = config.transformer_config()  # checks the sizes before anything is drawn
    check_positive_int("steps", config.steps)

    model = EncoderOnly(model_config, generator=torch.Generator().manual_seed(config.seed))
    ids, answers = sentence_data()
    training = Training(model)
    with reproducible_training(model):  # float64, one thread (see reproducible.py)
        optimiser = Adam(model.parameters(), lr=config.learning_rate)  # = torch.optim.Adam
        for _ in range(config.steps):
            logits = model(ids).logits[:, -1]  # (16, 3, |V|) -> (16, |V|): at the verb
            loss = nn.functional.cross_entropy(logits, answers)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            training.losses.append(loss.item())
    model.eval()
    return training


@dataclass
class FeedForwardTrace:
    """What each layer's FFN received and what it returned, for every position."""

    inputs: list[torch.Tensor]  # num_layers x (B, T, D): the vector the FFN reads
    updates: list[torch.Tensor]  # num_layers x (B, T, D): FFN(input), added back by Add & Norm
    embeddings: torch.Tensor  # (B, T, D): the stack's input
    outputs: list[torch.Tensor]  # num_layers x (B, T, D): each layer's output
    attention: list[torch.Tensor]  # num_layers x (B, H, T, T)


@torch.no_grad()
def feed_forward_trace(model: EncoderOnly, ids: torch.Tensor) -> FeedForwardTrace:
    """Run ``model`` on ``ids`` ``(B, T)`` and record every FFN's input and output.

    In post-LN (the paper) the FFN reads the vector after attention's Add & Norm and the layer
    outputs ``LayerNorm(input + update)``; in pre-LN it reads ``LayerNorm(x)`` of the vector
    ``x`` after attention, and the layer outputs ``x + update``.
    """
    inputs: list[torch.Tensor] = []
    updates: list[torch.Tensor] = []

    def record(module: nn.Module, arguments: tuple[torch.Tensor, ...], output: torch.Tensor):
        inputs.append(arguments[0])
        updates.append(output)

    layers = model.encoder.layers
    handles = [layer.feed_forward.register_forward_hook(record) for layer in layers]
    try:
        output = model(ids, need_weights=True).encoder
    finally:
        for handle in handles:
            handle.remove()
    return FeedForwardTrace(
        inputs=inputs,
        updates=updates,
        embeddings=output.hidden_states[0],
        outputs=output.hidden_states[1:],
        attention=output.self_attention,
    )


@torch.no_grad()
def yes_probability(
    model: EncoderOnly, ids: torch.Tensor, skip_feed_forward: bool = False
) -> torch.Tensor:
    """P("yes") against "no" at the last position of each sentence ``(B,)``: the softmax over
    the two words' logits. ``skip_feed_forward=True`` replaces every FFN's output by zeros, so
    each layer keeps only its attention and Add & Norm."""

    def zero(module: nn.Module, arguments: tuple, output: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(output)

    handles = (
        [layer.feed_forward.register_forward_hook(zero) for layer in model.encoder.layers]
        if skip_feed_forward
        else []
    )
    try:
        logits = model(ids).logits[:, -1]  # (B, T, |V|) -> (B, |V|)
    finally:
        for handle in handles:
            handle.remove()
    pair = logits[:, [WORDS.index("yes"), WORDS.index("no")]]  # (B, 2)
    return torch.softmax(pair, dim=-1)[:, 0]  # (B,)
