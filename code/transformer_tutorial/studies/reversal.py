"""A complete tiny Transformer, trained on CPU in seconds to reverse letter sequences.

Source: Vaswani et al. (2017): the model of section 3 and Figure 1 (:mod:`transformer`, built
with ``kind="encoder-decoder"``), trained as in section 5: teacher forcing with a
cross-entropy loss, Adam with ``beta_2 = 0.98`` and ``epsilon = 1e-9`` (5.3, :class:`Adam`),
a learning rate that warms up linearly first. Two things are smaller or different, so that
training takes seconds: every size (``d_model = 32``, 2 + 2 layers), and the schedule after
the warm-up (a cosine decay to zero instead of the paper's ``step^-0.5``, so the last steps
are calm).

The task. The source is a word of 3 to 10 letters followed by ``[END]``; the target is the
same letters in reverse order, then ``[END]``::

    source        a t t e n t i o n [END]
    decoder in    [START] n o i t n e t t a          (the target shifted right)
    decoder out   n o i t n e t t a [END]            (what each position must predict)

Batches hold words of different lengths, padded with ``[PAD]`` (ID 0, which the model's
masks hide and the loss ignores). Reversal needs every part of the model: the encoder must
find out how long the word is, and for output letter ``t`` the decoder's cross-attention must
look at source position ``n - 1 - t``, an anti-diagonal that is easy to see in the weights.

Data. Training words are drawn fresh for every step from a ``torch.Generator``; a fixed
**held-out** set (drawn once from its own seed) is excluded from them, so the exact-match
score on it measures words the model has never seen. Initial weights come from their own
generator, training runs on one thread, and the same config gives the same weights bit for
bit (:func:`main` retrains and :func:`load_trained_model` loads the shipped result).

The module also holds what chapter 9 shows of the trained model: every tensor's shape on the
way through (:func:`trace_shapes`), its attention as records for the heatmap explorer
(:func:`attention_records`) and its next-token probabilities (:func:`next_token_probabilities`).
"""

import argparse
import json
import math
import string
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from transformer_tutorial.model.checks import check_positive_int
from transformer_tutorial.model.optim import Adam
from transformer_tutorial.model.transformer import (
    EncoderDecoder,
    ModelOutput,
    StackOutput,
    TransformerConfig,
    beam_search,
    build_model,
    count_parameters,
    greedy_translate,
)
from transformer_tutorial.studies.records import AttentionRecord
from transformer_tutorial.studies.reproducible import reproducible_training

__all__ = [
    "ALPHABET",
    "END",
    "END_ID",
    "LETTER_IDS",
    "LOG_FILE",
    "PAD",
    "PAD_ID",
    "START",
    "START_ID",
    "VOCABULARY",
    "WEIGHTS_DIR",
    "WEIGHTS_FILE",
    "AttentionSummary",
    "ReversalBatch",
    "ShapeRow",
    "TrainingConfig",
    "TrainingLog",
    "TrainingRun",
    "Word",
    "attention_records",
    "attention_summary",
    "beam_translate",
    "correct",
    "decode",
    "encode",
    "exact_match",
    "held_out_words",
    "load_trained_config",
    "load_trained_model",
    "load_training_log",
    "loss_on",
    "main",
    "make_batch",
    "next_token_probabilities",
    "random_words",
    "save_run",
    "trace_shapes",
    "train",
    "training_batches",
    "translate",
]


PAD, START, END = "[PAD]", "[START]", "[END]"


ALPHABET = string.ascii_lowercase


VOCABULARY: tuple[str, ...] = (PAD, START, END, *ALPHABET)  # token ID i is VOCABULARY[i]


PAD_ID, START_ID, END_ID = 0, 1, 2


LETTER_IDS = range(3, len(VOCABULARY))  # IDs of the 26 letters


WEIGHTS_DIR = Path(__file__).parents[1] / "weights"


WEIGHTS_FILE = "reversal.safetensors"


LOG_FILE = "reversal_log.json"


Word = tuple[int, ...]  # one word as letter IDs, without special tokens


@dataclass
class TrainingConfig:
    """The task, the tiny model and its training run. The defaults made the shipped weights."""

    min_length: int = 3  # shortest word (letters)
    max_length: int = 10  # longest word (letters); the source is one [END] longer
    d_model: int = 32  # width of every token vector (paper: 512)
    num_heads: int = 4  # heads per attention layer, d_k = 8 (paper: 8 heads, d_k = 64)
    d_ff: int = 128  # feed-forward hidden width, 4 x d_model as in the paper
    num_layers: int = 2  # layers in the encoder, and in the decoder (paper: 6 each)
    position_table: int = 32  # positions the sinusoidal table covers (no parameters)
    steps: int = 500  # optimiser steps
    batch_size: int = 64  # words per step
    learning_rate: float = 3e-3  # peak learning rate, reached after the warm-up
    warmup_steps: int = 50  # linear warm-up from 0; then a cosine decay to 0 at the last step
    held_out_size: int = 1000  # distinct words never used for training
    seed: int = 0  # initial weights (seed) and the training words (seed + 1)
    held_out_seed: int = 2017  # the held-out words: fixed, whatever the training seed
    log_every: int = 50  # measure exact match every this many steps, ...
    monitor_size: int = 200  # ... on this many of the held-out words (all of them: slower)

    def __post_init__(self) -> None:
        for name in (
            "min_length", "max_length", "d_model", "num_heads", "d_ff", "num_layers",
            "position_table", "steps", "batch_size", "warmup_steps", "held_out_size", "log_every",
            "monitor_size",
        ):  # fmt: skip
            check_positive_int(name, getattr(self, name))
        if self.min_length > self.max_length:
            raise ValueError(
                f"min_length={self.min_length} must not exceed max_length={self.max_length}"
            )
        if self.position_table < self.max_length + 1:
            raise ValueError(
                f"position_table={self.position_table} must cover the longest source, "
                f"max_length + 1 = {self.max_length + 1} positions (letters and [END])"
            )
        if self.monitor_size > self.held_out_size:
            raise ValueError(
                f"monitor_size={self.monitor_size} exceeds held_out_size={self.held_out_size}"
            )
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps={self.warmup_steps} must be below steps={self.steps}")
        for name in ("seed", "held_out_seed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        possible = sum(26**length for length in range(self.min_length, self.max_length + 1))
        if self.held_out_size > possible // 2:
            raise ValueError(
                f"held_out_size={self.held_out_size} would hold out more than half of the "
                f"{possible} possible words; training needs the rest"
            )

    def model_config(self) -> TransformerConfig:
        """The paper's architecture (post-LN, ReLU, sinusoidal positions, shared vocabulary,
        output layer tied to the embeddings), at this config's sizes, without dropout."""
        return TransformerConfig(
            kind="encoder-decoder",
            vocab_size=len(VOCABULARY),
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            num_layers=self.num_layers,
            max_length=self.position_table,
            dropout=0.0,  # a fresh batch every step: nothing to overfit, nothing to regularise
            pad_id=PAD_ID,
        )

    def learning_rate_at(self, step: int) -> float:
        """Learning rate for optimiser step ``step`` (0-based): linear warm-up, cosine decay."""
        if step < self.warmup_steps:
            return self.learning_rate * (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / (self.steps - self.warmup_steps)
        return self.learning_rate * 0.5 * (1 + math.cos(math.pi * progress))


def encode(text: str) -> Word:
    """Letters ``a``-``z`` of ``text`` as token IDs (case ignored, nothing else allowed)."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"text must be a non-empty string of letters a-z, got {text!r}")
    unknown = sorted({character for character in text.lower() if character not in ALPHABET})
    if unknown:
        raise ValueError(f"the reversal model only knows the letters a-z; got {unknown}")
    return tuple(VOCABULARY.index(character) for character in text.lower())


def decode(ids: Sequence[int]) -> str:
    """Token IDs back to text: letters as they are, special tokens by name."""
    if any(not 0 <= int(index) < len(VOCABULARY) for index in ids):
        raise ValueError(f"ids must lie in [0, {len(VOCABULARY)}), got {list(ids)}")
    return "".join(VOCABULARY[int(index)] for index in ids)


@dataclass
class ReversalBatch:
    """Words padded into tensors: what the model reads and what it must predict."""

    source: torch.Tensor  # (B, S): letters, [END], then [PAD]; S = longest word + 1
    target_in: torch.Tensor  # (B, T): [START], reversed letters, then [PAD]; T = S
    target_out: torch.Tensor  # (B, T): reversed letters, [END], then [PAD]
    lengths: torch.Tensor  # (B,): letters in each word

    @property
    def words(self) -> list[Word]:
        return [
            tuple(row[:length].tolist())
            for row, length in zip(self.source, self.lengths.tolist(), strict=True)
        ]


def make_batch(words: Sequence[Sequence[int]]) -> ReversalBatch:
    """Pad ``words`` (letter IDs) into a :class:`ReversalBatch`."""
    if len(words) == 0:
        raise ValueError("words is empty: give at least one word")
    for word in words:
        if len(word) == 0 or any(int(index) not in LETTER_IDS for index in word):
            raise ValueError(f"every word needs >= 1 letter ID in [3, 28], got {list(word)}")
    width = max(len(word) for word in words) + 1  # room for [END] / [START]
    letters = torch.tensor([[*word] + [PAD_ID] * (width - len(word)) for word in words])  # (B, S)
    lengths = torch.tensor([len(word) for word in words])  # (B,)
    rows, positions = torch.arange(len(words)), torch.arange(width)  # (B,), (S,)
    source = letters.clone()
    source[rows, lengths] = END_ID  # right after the last letter
    mirrored = (lengths[:, None] - 1 - positions).clamp(min=0)  # (B, S): position n-1-t
    reversed_letters = letters.gather(1, mirrored).masked_fill(
        positions >= lengths[:, None], PAD_ID
    )  # (B, S): the letters in reverse order, then [PAD]
    target_out = reversed_letters.clone()
    target_out[rows, lengths] = END_ID
    target_in = torch.cat(
        [torch.full((len(words), 1), START_ID), reversed_letters[:, :-1]], dim=1
    )  # (B, 1) + (B, S - 1) -> (B, S): the target shifted right by one
    return ReversalBatch(source, target_in, target_out, lengths)


def _draw_word(config: TrainingConfig, generator: torch.Generator) -> Word:
    length = int(torch.randint(config.min_length, config.max_length + 1, (1,), generator=generator))
    letters = torch.randint(LETTER_IDS.start, LETTER_IDS.stop, (length,), generator=generator)
    return tuple(letters.tolist())


def random_words(
    count: int,
    config: TrainingConfig,
    generator: torch.Generator,
    exclude: frozenset[Word] | set[Word] = frozenset(),
) -> list[Word]:
    """``count`` words, lengths uniform in ``[min_length, max_length]``, letters uniform;
    a word in ``exclude`` is drawn again (so the held-out words never reach training)."""
    check_positive_int("count", count)
    lengths = torch.randint(config.min_length, config.max_length + 1, (count,), generator=generator)
    letters = torch.randint(
        LETTER_IDS.start, LETTER_IDS.stop, (count, config.max_length), generator=generator
    )  # (B, max_length): each word keeps the first `length` letters of its row
    words = [
        tuple(row[:length]) for row, length in zip(letters.tolist(), lengths.tolist(), strict=True)
    ]
    for index, word in enumerate(words):
        while word in exclude:
            word = _draw_word(config, generator)
        words[index] = word
    return words


def held_out_words(config: TrainingConfig) -> list[Word]:
    """``held_out_size`` distinct words from ``held_out_seed``, in the order drawn."""
    generator = torch.Generator().manual_seed(config.held_out_seed)
    words: dict[Word, None] = {}  # a dict keeps the order of first appearance
    while len(words) < config.held_out_size:
        words[_draw_word(config, generator)] = None
    return list(words)


def training_batches(config: TrainingConfig, held_out: Sequence[Word] | None = None):
    """The ``steps`` training batches, in order, from the generator seeded ``seed + 1``;
    none of them contains a held-out word."""
    exclude = frozenset(held_out_words(config) if held_out is None else held_out)
    generator = torch.Generator().manual_seed(config.seed + 1)
    for _ in range(config.steps):
        yield make_batch(random_words(config.batch_size, config, generator, exclude))


@dataclass
class TrainingLog:
    """What happened during training: one loss per step and periodic held-out scores."""

    losses: list[float] = field(default_factory=list)  # cross-entropy of each step's batch
    learning_rates: list[float] = field(default_factory=list)  # the rate each step used
    eval_steps: list[int] = field(default_factory=list)  # steps after which we measured
    exact_match: list[float] = field(default_factory=list)  # on the monitored held-out words


@dataclass
class TrainingRun:
    config: TrainingConfig
    model: EncoderDecoder
    log: TrainingLog


def loss_on(model: EncoderDecoder, batch: ReversalBatch) -> torch.Tensor:
    """Mean cross-entropy of predicting ``target_out`` from ``source`` and ``target_in``
    (teacher forcing: all positions at once, the causal mask keeps each honest)."""
    logits = model(batch.source, batch.target_in).logits  # (B, T, |V|)
    return nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),  # (B, T, |V|) -> (B T, |V|)
        batch.target_out.reshape(-1),  # (B, T) -> (B T,)
        ignore_index=PAD_ID,  # padding positions predict nothing
    )


def train(config: TrainingConfig | None = None, stop_after: int | None = None) -> TrainingRun:
    """Train a fresh model on ``config`` (default: the shipped one) in float64 on one CPU thread.

    ``stop_after`` ends the run after that many steps of the *same* schedule and data (the first
    steps of the full run, exactly), for a quick look at training without the wait.

    The same config gives the same weights bit for bit on the same machine and library
    versions, and on any other computer weights that differ by at most one float32 rounding
    (see :mod:`~transformer_tutorial.studies.reproducible`). The caller's settings are restored.
    """
    config = TrainingConfig() if config is None else config
    if stop_after is not None:
        check_positive_int("stop_after", stop_after)
        if stop_after > config.steps:
            raise ValueError(f"stop_after={stop_after} is beyond the run's steps={config.steps}")
    stop_after = config.steps if stop_after is None else stop_after
    model = build_model(config.model_config(), torch.Generator().manual_seed(config.seed))
    held_out = held_out_words(config)
    log = TrainingLog()
    model.train()
    with reproducible_training(model):  # float64, one thread (see reproducible.py)
        adam = Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)  # the paper's, 5.3
        for step, batch in enumerate(training_batches(config, held_out)):
            if step == stop_after:
                break
            rate = config.learning_rate_at(step)
            loss = loss_on(model, batch)
            adam.zero_grad()
            loss.backward()
            adam.step(rate)
            log.losses.append(loss.item())
            log.learning_rates.append(rate)
            if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
                log.eval_steps.append(step + 1)
                log.exact_match.append(exact_match(model, held_out[: config.monitor_size]))
    model.eval()
    return TrainingRun(config, model, log)


def _predict(model: EncoderDecoder, batch: ReversalBatch) -> torch.Tensor:
    """Greedy output ``(B, S)``: one position more than the longest word, for [END]."""
    return greedy_translate(model, batch.source, START_ID, batch.source.shape[1])


def _cut(row: Sequence[int]) -> tuple[int, ...]:
    """The tokens before the first [END] (all of them if there is none)."""
    row = list(row)
    return tuple(row[: row.index(END_ID)] if END_ID in row else row)


@torch.no_grad()
def exact_match(model: EncoderDecoder, words: Sequence[Word], batch_size: int = 500) -> float:
    """Fraction of ``words`` whose greedy output is exactly the reversed word, then [END].

    Words are decoded in batches of equal length (so no step is spent past the longest word).
    """
    return float(sum(correct(model, words, batch_size)) / len(words))


@torch.no_grad()
def correct(model: EncoderDecoder, words: Sequence[Word], batch_size: int = 500) -> list[bool]:
    """For each of ``words``: is the greedy output exactly the reversed word, then [END]?"""
    check_positive_int("batch_size", batch_size)
    if len(words) == 0:
        raise ValueError("words is empty: give at least one word")
    by_length: dict[int, list[int]] = {}
    for index, word in enumerate(words):
        by_length.setdefault(len(word), []).append(index)
    right = [False] * len(words)
    for _, indices in sorted(by_length.items()):
        for first in range(0, len(indices), batch_size):
            chunk = indices[first : first + batch_size]
            batch = make_batch([words[index] for index in chunk])
            output = _predict(model, batch)  # (B, length + 1)
            expected = batch.target_out  # (B, length + 1): reversed letters, then [END]
            for index, matches in zip(chunk, (output == expected).all(dim=1).tolist(), strict=True):
                right[index] = matches
    return right


@torch.no_grad()
def translate(model: EncoderDecoder, texts: Sequence[str]) -> list[str]:
    """The model's output for each text (letters a-z), up to its first [END]."""
    if isinstance(texts, str) or len(texts) == 0:
        raise ValueError("texts must be a non-empty list of strings")
    batch = make_batch([encode(text) for text in texts])
    output = _predict(model, batch)  # (B, S)
    return [decode(_cut(row)) for row in output.tolist()]


@torch.no_grad()
def beam_translate(
    model: EncoderDecoder, text: str, beam_size: int = 4, alpha: float = 0.6
) -> list[tuple[str, float, float]]:
    """Beam search (:func:`~transformer_tutorial.model.transformer.beam_search`, the paper's
    beam size 4 and length penalty 0.6) on one word: up to ``beam_size`` outputs, best first,
    each as (letters before [END], log-probability, score). An output that never wrote [END]
    within one position more than the word is marked with a trailing "…"."""
    source = torch.tensor([[*encode(text), END_ID]])  # (1, S)
    hypotheses = beam_search(model, source, START_ID, END_ID, source.shape[1], beam_size, alpha)
    return [
        (decode(_cut(h.tokens)) + ("" if h.finished else "…"), h.log_probability, h.score)
        for h in hypotheses
    ]


def save_run(run: TrainingRun, directory: Path | str = WEIGHTS_DIR) -> tuple[Path, Path]:
    """Write the weights (safetensors) and the log (JSON), byte for byte the same every time.

    The embedding matrix is shared by the encoder, the decoder and the output layer, so the
    state dict names one tensor three times: it is stored once, under its first name in sorted
    order, and the other names are recorded as aliases in the file's metadata, next to the
    config (one metadata entry, so its order cannot vary).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights, log = directory / WEIGHTS_FILE, directory / LOG_FILE
    state = run.model.state_dict()
    stored: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    first_name: dict[int, str] = {}  # storage address -> the name it is stored under
    for name in sorted(state):
        address = state[name].untyped_storage().data_ptr()
        if address in first_name:
            aliases[name] = first_name[address]
        else:
            first_name[address] = name
            stored[name] = state[name].contiguous()
    metadata = json.dumps({"config": asdict(run.config), "aliases": aliases}, sort_keys=True)
    save_file(stored, str(weights), metadata={"training": metadata})
    log.write_text(json.dumps({"config": asdict(run.config), **asdict(run.log)}, indent=1) + "\n")
    return weights, log


def _read_metadata(directory: Path | str) -> tuple[Path, dict]:
    path = Path(directory) / WEIGHTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no trained weights at {path}; run python -m {__name__}")
    with safe_open(str(path), framework="pt") as handle:
        return path, json.loads(handle.metadata()["training"])


def load_trained_model(directory: Path | str = WEIGHTS_DIR) -> EncoderDecoder:
    """The trained reversal model from ``directory`` (default: the weights shipped in the
    package), in eval mode. Every tensor must be there with its shape (strict loading)."""
    path, metadata = _read_metadata(directory)
    model = build_model(TrainingConfig(**metadata["config"]).model_config())
    state = load_file(str(path))
    for alias, name in metadata["aliases"].items():
        state[alias] = state[name]  # the shared embedding, under its other names
    model.load_state_dict(state, strict=True)
    return model.eval()


def load_trained_config(directory: Path | str = WEIGHTS_DIR) -> TrainingConfig:
    """The :class:`TrainingConfig` that made the weights in ``directory`` (from their file)."""
    return TrainingConfig(**_read_metadata(directory)[1]["config"])


def load_training_log(directory: Path | str = WEIGHTS_DIR) -> TrainingLog:
    """The log written next to the weights by the run that made them."""
    path = Path(directory) / LOG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no training log at {path}; run python -m {__name__}")
    data = json.loads(path.read_text())
    return TrainingLog(**{name: data[name] for name in TrainingLog.__dataclass_fields__})


@dataclass
class ShapeRow:
    """One module's call during a forward pass: where it sits and what went in and out."""

    name: str  # module path, e.g. "decoder.layers.0.cross_attention"
    kind: str  # its class, e.g. "MultiHeadAttention"
    inputs: list[tuple[int, ...]]  # shapes of its tensor arguments
    outputs: list[tuple[int, ...]]  # shapes of the tensors it returned


def _shapes(value) -> list[tuple[int, ...]]:
    if isinstance(value, torch.Tensor):
        return [tuple(value.shape)]
    if isinstance(value, StackOutput):
        return [tuple(value.hidden.shape)]  # a stack's result: its last hidden state
    if isinstance(value, ModelOutput):
        return _shapes(value.logits)
    if isinstance(value, (tuple, list)):
        return [shape for item in value for shape in _shapes(item)]
    return []


def trace_shapes(
    model: EncoderDecoder,
    source: torch.Tensor,
    target: torch.Tensor,
    names: Sequence[str] | None = None,
    need_weights: bool = True,
) -> list[ShapeRow]:
    """Run ``model(source, target)`` with forward hooks and return, in call order, the
    shapes entering and leaving each module named in ``names`` (default: every module).

    A module called twice (the embedding shared by source and target) gives
    two rows; a stack's output is shown as the shape of its last hidden state.
    """
    modules = dict(model.named_modules())
    wanted = list(modules) if names is None else list(names)
    missing = [name for name in wanted if name not in modules]
    if missing:
        raise ValueError(f"the model has no modules named {missing}")
    rows: list[ShapeRow] = []
    handles = []
    for name in wanted:
        module = modules[name]

        def hook(module, args, kwargs, output, name=name):
            inputs = _shapes(list(args) + [v for k, v in kwargs.items() if k != "mask"])
            rows.append(ShapeRow(name, type(module).__name__, inputs, _shapes(output)))

        handles.append(module.register_forward_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            model(source, target, need_weights=need_weights)
    finally:
        for handle in handles:
            handle.remove()
    return rows


def _tokens(ids: Sequence[int]) -> list[str]:
    return [VOCABULARY[int(index)] for index in ids]


@torch.no_grad()
def attention_records(model: EncoderDecoder, texts: Sequence[str]) -> dict[str, list]:
    """The model's attention on each text, as explorer records, for the three kinds of
    attention: ``"encoder self-attention"`` (source over source), ``"decoder self-attention"``
    (masked: output so far over output so far) and ``"cross-attention"`` (output over source).

    The decoder reads ``[START]`` and the model's *own* greedy output (not the right answer),
    so the weights are the ones it used to produce what :func:`translate` returns.
    """
    outputs = translate(model, texts)
    records: dict[str, list] = {
        "encoder self-attention": [],
        "decoder self-attention": [],
        "cross-attention": [],
    }
    layers = model.config.num_layers
    for text, output in zip(texts, outputs, strict=True):
        source = torch.tensor([[*encode(text), END_ID]])  # (1, S)
        target = torch.tensor([[START_ID, *(encode(output) if output else ())]])  # (1, T)
        result = model(source, target, need_weights=True)
        source_tokens, target_tokens = _tokens(source[0]), _tokens(target[0])
        label = f"{text} → {output or '(nothing)'}"
        weights = {
            "encoder self-attention": result.encoder.self_attention,
            "decoder self-attention": result.decoder.self_attention,
            "cross-attention": result.decoder.cross_attention,
        }
        for kind, per_layer in weights.items():
            queries = source_tokens if kind.startswith("encoder") else target_tokens
            keys = target_tokens if kind.startswith("decoder self") else source_tokens
            stack = "encoder" if kind.startswith("encoder") else "decoder"
            records[kind].append(
                AttentionRecord(
                    label=label,
                    tokens=queries,
                    key_tokens=keys,
                    weights=torch.cat(per_layer).double().numpy(),  # (layers, H, T, S)
                    layer_names=[f"{stack} layer {index + 1}" for index in range(layers)],
                )
            )
    return records


@dataclass
class AttentionSummary:
    """Where the trained model's heads look, averaged over many words (``(L, H)`` arrays)."""

    cross_on_mirror: np.ndarray  # mean cross-attention weight of output letter t on source n-1-t
    cross_peak_on_mirror: np.ndarray  # share of output letters whose largest weight is there
    encoder_on_end: np.ndarray  # mean encoder self-attention weight of a letter on [END]
    cross_on_end: np.ndarray  # mean cross-attention weight of output letter t on source [END]
    cross_on_tail: np.ndarray  # ... on [END] and the word's last three letters together
    tail_if_uniform: float  # what cross_on_tail would be if every head spread its weight evenly
    decoder_on_start: np.ndarray  # (L, H, T): mean weight of decoder row t on [START] (NaN: no
    # word writes a letter at row t)


@torch.no_grad()
def attention_summary(model: EncoderDecoder, words: Sequence[Word]) -> AttentionSummary:
    """Measure the patterns chapter 9 points at, on ``words`` (teacher forcing: the decoder
    reads the right answer, which is also what a model with full exact match writes).

    For a word of ``n`` letters, output letter ``t`` (decoder query ``t``) should fetch source
    position ``n - 1 - t`` (its mirror); the encoder can find the word's length at ``[END]``
    (source position ``n``); and the decoder's self-attention can look back at ``[START]``.
    Only queries that write a letter count, never [PAD] nor the one that writes [END].
    """
    batch = make_batch(words)
    result = model(batch.source, batch.target_in, need_weights=True)
    lengths = batch.lengths  # (B,)
    positions = torch.arange(batch.source.shape[1])  # (S,)
    letter = positions[None, :] < lengths[:, None]  # (B, T): query t writes a letter
    mirror = (lengths[:, None] - 1 - positions[None, :]).clamp(min=0)  # (B, T): n - 1 - t
    tail = (positions[None, :] >= lengths[:, None] - 3) & (positions[None, :] <= lengths[:, None])
    # (B, S): the last three letters and [END]
    count = letter.sum()
    mask = letter[:, None, :]  # (B, 1, T)

    def mean(values: torch.Tensor) -> np.ndarray:  # (B, H, T) -> (H,), over letter queries
        return ((values * mask).sum(dim=(0, 2)) / count).numpy()

    names = ("mirror", "peak", "encoder end", "cross end", "tail", "start")
    found: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for cross, encoder, decoder in zip(
        result.decoder.cross_attention,
        result.encoder.self_attention,
        result.decoder.self_attention,
        strict=True,
    ):  # cross (B, H, T, S), encoder (B, H, S, S), decoder (B, H, T, T)
        index = mirror[:, None, :, None].expand(-1, cross.shape[1], -1, 1)  # (B, H, T, 1)
        end = lengths[:, None, None, None].expand(-1, *cross.shape[1:3], 1)  # (B, H, T, 1): n
        # (make_batch gives T = S, so the same index serves the encoder's (B, H, S, S))
        found["mirror"].append(mean(cross.gather(-1, index)[..., 0]))  # weight on n - 1 - t
        found["peak"].append(mean(cross.argmax(dim=-1) == index[..., 0]))
        found["encoder end"].append(mean(encoder.gather(-1, end)[..., 0]))  # letter on [END]
        found["cross end"].append(mean(cross.gather(-1, end)[..., 0]))  # cross weight on [END]
        found["tail"].append(mean((cross * tail[:, None, None, :]).sum(dim=-1)))
        on_start = decoder[..., 0]  # (B, H, T): weight of each row on [START]
        words_at = letter.sum(dim=0)  # (T,): words that write a letter at row t
        start = (on_start * mask).sum(dim=0) / words_at  # (H, T); NaN where no word is that long
        found["start"].append(start.numpy())
    share = tail.sum(dim=1, keepdim=True) / (lengths[:, None] + 1)  # (B, 1): if spread evenly
    uniform = float((share * letter).sum() / count)
    stacked = [np.stack(found[name]) for name in names]
    return AttentionSummary(*stacked[:5], tail_if_uniform=uniform, decoder_on_start=stacked[5])


@torch.no_grad()
def next_token_probabilities(
    model: EncoderDecoder, text: str, prefix: str = ""
) -> tuple[torch.Tensor, torch.Tensor]:
    """The final linear layer and softmax for one decoding step.

    The decoder reads ``[START]`` + ``prefix`` (letters already written) for the source
    ``text``; returns the logits ``(V,)`` and the probabilities ``(V,)`` of the next token.
    """
    source = torch.tensor([[*encode(text), END_ID]])  # (1, S)
    written = encode(prefix) if prefix else ()
    if len(written) + 1 > model.config.max_length:
        raise ValueError(f"prefix of {len(written)} letters is longer than the position table")
    target = torch.tensor([[START_ID, *written]])  # (1, t + 1)
    hidden = model.decode(target, model.encode(source), source).hidden  # (1, t + 1, D)
    logits = model.head(hidden[:, -1])[0]  # (1, D) -> (1, |V|) -> (|V|,)
    return logits, torch.softmax(logits, dim=-1)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m transformer_tutorial.studies.reversal``: train with the default config, save the
    weights and log (into the package by default), print the held-out exact match, the wall
    time, and how far the result is from the weights that were there before (bit for bit?)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--output", type=Path, default=WEIGHTS_DIR, help="directory to write")
    arguments = parser.parse_args(argv)
    previous = None
    if (arguments.output / WEIGHTS_FILE).is_file():
        previous = load_trained_model(arguments.output).state_dict()
    started, cpu_started = time.perf_counter(), time.process_time()
    run = train()
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    held_out = held_out_words(run.config)
    score = exact_match(run.model, held_out)
    weights, log = save_run(run, arguments.output)
    print(f"parameters: {count_parameters(run.model):,}")
    print(f"held-out exact match: {score:.1%} of {len(held_out)} words never seen in training")
    print(f"training: {run.config.steps} steps in {seconds:.1f} s wall, {cpu_seconds:.1f} s CPU")
    if previous is not None:
        state = run.model.state_dict()
        if state.keys() != previous.keys():
            print("the weights before had other names: not compared")
        else:
            same = all(torch.equal(state[name], previous[name]) for name in state)
            largest = max((state[name] - previous[name]).abs().max().item() for name in state)
            print(f"same weights as before, bit for bit: {same} (largest difference {largest:.1e})")
    print(f"wrote {weights} ({weights.stat().st_size:,} bytes) and {log}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
