"""A tiny character-level causal language model, and the model that cheats (chapter 8).

Source: Vaswani et al. (2017), section 3.2.3: the decoder's self-attention is masked so that
"the predictions for position i can depend only on the known outputs at positions less than i".
A language model is trained on every position of a window *at once*: position ``t`` reads the
characters ``0 .. t`` and is scored on character ``t + 1``, which sits in the same window. With
the causal mask, position ``t`` cannot see it. Without the mask (``causal=False``), the answer is
one attention step away: the model learns to copy it, its training loss drops far below what
honest prediction can reach, and it has learned nothing it can use when the next character is
not there yet (held-out evaluation with the mask, or generation).

Everything here is tiny and seeded: a built-in corpus of a few hundred characters
(:data:`TRAINING_TEXT`, :data:`HELD_OUT_TEXT`), a :class:`CharVocabulary` with ``[PAD]`` at ID 0,
random training windows (:func:`training_windows`), and one :class:`CausalLMConfig` from which
:func:`train_char_lm` builds the *same* ``transformer.DecoderOnly`` with or without the mask.
:func:`evaluate` scores a model on held-out text, :func:`generate_text` continues a prompt
greedily, and :func:`prefix_by_prefix_logits` runs a prompt one token at a time, the way a model
generates, to compare with processing the whole prompt in parallel.
"""

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import torch
from torch import nn

from transformer_tutorial.model.checks import check_positive_int
from transformer_tutorial.model.optim import Adam
from transformer_tutorial.model.transformer import DecoderOnly, TransformerConfig
from transformer_tutorial.studies.reproducible import reproducible_training

__all__ = [
    "HELD_OUT_TEXT",
    "PAD_TOKEN",
    "TRAINING_TEXT",
    "VOCABULARY",
    "CausalLMConfig",
    "CharVocabulary",
    "Evaluation",
    "LMTraining",
    "evaluate",
    "generate_text",
    "known_ngram_fraction",
    "next_character_entropy",
    "next_token_loss",
    "prefix_by_prefix_logits",
    "train_char_lm",
    "training_windows",
]

# Sixteen short sentences: four animals, three verbs ("sat on", "saw", "ran to") and three
# things. Which word comes next is often a genuine choice, so honest prediction cannot reach
# zero loss.
TRAINING_TEXT = (
    "the cat sat on the mat. the dog sat on the log. the cat saw the dog. the dog saw the cat. "
    "the bird sat on the box. the fox saw the bird. the cat ran to the box. "
    "the dog ran to the fox. the fox sat on the mat. the bird saw the cat. "
    "the dog ran to the mat. the cat sat on the log. the fox ran to the dog. "
    "the bird ran to the log. the dog saw the fox. the cat saw the box. "
)
# New combinations of the same words: never seen in training, written in the same style.
HELD_OUT_TEXT = (
    "the fox saw the dog. the bird sat on the mat. the cat ran to the fox. the dog sat on the box. "
)
PAD_TOKEN = "[PAD]"  # ID 0 in every CharVocabulary (TransformerConfig's default pad_id)


@dataclass(frozen=True)
class CharVocabulary:
    """One token per character, with ``[PAD]`` first: ``tokens[0] == PAD_TOKEN``."""

    tokens: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.tokens or self.tokens[0] != PAD_TOKEN:
            raise ValueError(f"tokens must start with {PAD_TOKEN!r} (ID 0), got {self.tokens[:1]}")
        characters = self.tokens[1:]
        if any(len(token) != 1 for token in characters) or len(set(characters)) != len(characters):
            raise ValueError(f"tokens after {PAD_TOKEN} must be distinct single characters")

    @classmethod
    def from_text(cls, *texts: str) -> "CharVocabulary":
        """``[PAD]`` and every character used in ``texts``, sorted."""
        characters = sorted(set("".join(texts)))
        if not characters:
            raise ValueError("texts are empty: a vocabulary needs at least one character")
        return cls((PAD_TOKEN, *characters))

    @property
    def pad_id(self) -> int:
        return 0

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> torch.Tensor:
        """``text`` -> IDs ``(T,)``; characters outside the vocabulary raise ``ValueError``."""
        index = {token: i for i, token in enumerate(self.tokens) if i != self.pad_id}
        unknown = sorted({character for character in text if character not in index})
        if unknown:
            raise ValueError(f"text has characters outside the vocabulary: {unknown}")
        return torch.tensor([index[character] for character in text], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """IDs ``(T,)`` -> text (``[PAD]`` written out)."""
        ids = torch.as_tensor(ids)
        if ids.dim() != 1:
            raise ValueError(f"ids must have shape (T,), got {tuple(ids.shape)}")
        return "".join(self.tokens[i] for i in ids.tolist())


VOCABULARY = CharVocabulary.from_text(TRAINING_TEXT, HELD_OUT_TEXT)


@dataclass
class CausalLMConfig:
    """The model and the training run, shared by the honest model and the one that cheats."""

    d_model: int = 48  # width of every token vector
    num_heads: int = 4  # heads per attention layer (d_k = 12)
    num_layers: int = 2  # decoder layers
    context: int = 16  # T: characters per training window; the longest context the model reads
    batch_size: int = 16  # windows per optimiser step
    steps: int = 200  # Adam steps
    learning_rate: float = 1e-2  # Adam
    seed: int = 0  # initial weights (and, plus one, the order of training windows)

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads", "num_layers", "context", "batch_size", "steps"):
            check_positive_int(name, getattr(self, name))
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")

    def transformer_config(self, vocab_size: int) -> TransformerConfig:
        """The ``DecoderOnly`` configuration: pre-LN, sinusoidal positions, no dropout."""
        return TransformerConfig(
            kind="decoder-only",
            vocab_size=vocab_size,
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=4 * self.d_model,
            num_layers=self.num_layers,
            max_length=self.context,
            positional="sinusoidal",
            norm_first=True,
            dropout=0.0,
            pad_id=0,
        )


def training_windows(
    ids: torch.Tensor, context: int, batch_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``ids`` ``(N,)``: inputs ``(B, T)`` and targets ``(B, T)``
    with ``T = context``; the target at position ``t`` is the input at ``t + 1``."""
    check_positive_int("context", context)
    check_positive_int("batch_size", batch_size)
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1:
        raise ValueError(f"ids must be a 1-D tensor (N,), got {getattr(ids, 'shape', ids)}")
    if len(ids) < context + 1:
        raise ValueError(f"ids has {len(ids)} tokens; a window needs context + 1 = {context + 1}")
    starts = torch.randint(0, len(ids) - context, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(context + 1)  # (T + 1,)
    windows = ids[starts[:, None] + offsets[None, :]]  # (B, 1) + (1, T + 1) -> (B, T + 1)
    return windows[:, :-1], windows[:, 1:]  # (B, T), (B, T)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats per token) of logits ``(B, T, |V|)`` against targets ``(B, T)``."""
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (B, T, |V|) and targets (B, T), got {tuple(logits.shape)} and "
            f"{tuple(targets.shape)}"
        )
    return nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),  # (B, T, |V|) -> (B T, |V|)
        targets.reshape(-1),  # (B, T) -> (B T,)
    )


@dataclass
class LMTraining:
    """A trained model and how training went."""

    model: DecoderOnly
    config: CausalLMConfig
    causal: bool  # whether training used the causal mask
    vocabulary: CharVocabulary = VOCABULARY
    losses: list[float] = field(default_factory=list)  # training loss at each step


def train_char_lm(
    config: CausalLMConfig,
    causal: bool,
    text: str = TRAINING_TEXT,
    vocabulary: CharVocabulary = VOCABULARY,
) -> LMTraining:
    """Train a fresh ``DecoderOnly`` to predict the next character of ``text``, with Adam.

    ``causal=False`` trains the same model, from the same initial weights on the same windows,
    without the look-ahead mask: the model that cheats. The loss recorded at each step is the
    one the optimiser sees (computed with or without the mask, as trained). Runs on one thread
    in float64 (restoring the caller's settings), so the same config gives the same model run
    after run: see :mod:`~transformer_tutorial.studies.reproducible`.
    """
    ids = vocabulary.encode(text)  # (N,)
    model = DecoderOnly(
        config.transformer_config(len(vocabulary)),
        generator=torch.Generator().manual_seed(config.seed),
    )
    windows = torch.Generator().manual_seed(config.seed + 1)
    training = LMTraining(model, config, causal, vocabulary)
    model.train()
    with reproducible_training(model):  # float64, one thread (see reproducible.py)
        optimiser = Adam(model.parameters(), lr=config.learning_rate)
        for _ in range(config.steps):
            inputs, targets = training_windows(ids, config.context, config.batch_size, windows)
            loss = next_token_loss(model(inputs, causal=causal).logits, targets)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            training.losses.append(loss.item())
    model.eval()
    return training


@dataclass(frozen=True)
class Evaluation:
    """Next-character prediction on a text."""

    loss: float  # mean cross-entropy, nats per character
    accuracy: float  # fraction of characters whose most likely prediction is right
    predictions: int  # how many characters were predicted


@torch.no_grad()
def evaluate(
    model: DecoderOnly, ids: torch.Tensor, context: int, causal: bool = True
) -> Evaluation:
    """Score ``model`` on every next character of ``ids`` ``(N,)``, read in consecutive windows
    of ``context`` characters (the last one shorter), each position predicting the next.

    ``causal=True`` is the honest evaluation: position ``t`` sees characters ``0 .. t`` of its
    window. ``causal=False`` lets it see the character it must predict.
    """
    check_positive_int("context", context)
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or len(ids) < 2:
        raise ValueError("ids must be a 1-D tensor (N,) of at least 2 tokens")
    was_training = model.training
    model.eval()
    total, right, count = 0.0, 0, 0
    try:
        for start in range(0, len(ids) - 1, context):
            inputs = ids[start : start + context][None]  # (1, T)
            targets = ids[start + 1 : start + context + 1][None]  # (1, T')
            inputs = inputs[:, : targets.shape[1]]  # the last window: (1, T')
            logits = model(inputs, causal=causal).logits  # (1, T', |V|)
            total += next_token_loss(logits, targets).item() * targets.numel()
            right += int((logits.argmax(dim=-1) == targets).sum())
            count += targets.numel()
    finally:
        model.train(was_training)
    return Evaluation(total / count, right / count, count)


@torch.no_grad()
def generate_text(
    model: DecoderOnly,
    vocabulary: CharVocabulary,
    prompt: str,
    new_characters: int,
    context: int,
    causal: bool = True,
) -> str:
    """``prompt`` and ``new_characters`` greedy continuations (the most likely next character
    each time), reading at most the last ``context`` characters (the model's trained length)."""
    check_positive_int("new_characters", new_characters)
    check_positive_int("context", context)
    if not prompt:
        raise ValueError("prompt is empty: generation needs at least one character to start")
    was_training = model.training
    model.eval()
    try:
        ids = vocabulary.encode(prompt)[None]  # (1, T)
        for _ in range(new_characters):
            logits = model(ids[:, -context:], causal=causal).logits  # (1, T, |V|)
            next_id = logits[:, -1].argmax(dim=-1, keepdim=True)  # (1, 1)
            ids = torch.cat([ids, next_id], dim=1)  # (1, T) -> (1, T + 1)
    finally:
        model.train(was_training)
    return vocabulary.decode(ids[0])


def _words(text: str) -> list[str]:
    """Words (runs of letters) and full stops, in order; an unfinished last word is dropped."""
    text = text.lower()
    tokens = re.findall(r"[a-z]+|\.", text)
    if tokens and text[-1:].isalpha():
        tokens = tokens[:-1]  # cut off mid-word by the end of the text
    return tokens


def known_ngram_fraction(text: str, n: int = 1, reference: str = TRAINING_TEXT) -> float:
    """Fraction of the runs of ``n`` consecutive words of ``text`` (full stops count as words)
    that also occur in ``reference``: ``n = 1`` asks "are these real words?", ``n = 2`` "do
    these words follow each other like that in the training text?". 0.0 if there are none."""
    check_positive_int("n", n)
    words, known = _words(text), _words(reference)
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    known_grams = {tuple(known[i : i + n]) for i in range(len(known) - n + 1)}
    return sum(gram in known_grams for gram in grams) / len(grams)


def next_character_entropy(text: str, context: int) -> dict[int, float]:
    """The loss no model can beat on ``text``'s training windows: for ``k = 1, ..., context``
    characters seen, the entropy (nats) of the next character given the ``k`` before it, over
    the window starts :func:`training_windows` draws from. Position ``t`` of a window has seen
    ``t + 1`` characters, so the mean of the values is the floor of the mean training loss."""
    check_positive_int("context", context)
    if len(text) < context + 1:
        raise ValueError(f"text has {len(text)} characters; a window needs context + 1")
    starts = range(len(text) - context)
    entropy = {}
    for seen in range(1, context + 1):
        follows = defaultdict(Counter)  # the ``seen`` characters -> counts of the next one
        for start in starts:
            follows[text[start : start + seen]][text[start + seen]] += 1
        entropy[seen] = -sum(  # sum over windows of -ln p(next | seen), by counts
            n * math.log(n / sum(counts.values()))
            for counts in follows.values()
            for n in counts.values()
        )
        entropy[seen] /= len(starts)  # mean over the windows
    return entropy


@torch.no_grad()
def prefix_by_prefix_logits(model: DecoderOnly, ids: torch.Tensor) -> torch.Tensor:
    """Logits ``(B, T, |V|)`` computed the way a model generates: row ``t`` is the *last*
    position's output for the prefix ``ids[:, : t + 1]`` alone, so no position can ever see a
    later one, mask or no mask. Compare with ``model(ids, causal=...)`` run in parallel."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ValueError(f"ids must have shape (B, T), got {getattr(ids, 'shape', ids)}")
    was_training = model.training
    model.eval()
    try:
        rows = [model(ids[:, : t + 1]).logits[:, -1] for t in range(ids.shape[1])]  # T x (B, |V|)
    finally:
        model.train(was_training)
    return torch.stack(rows, dim=1)  # T x (B, |V|) -> (B, T, |V|)
