"""A toy task on which attention heads must specialise, and the tiny model that learns it.

Chapter "Multi-head attention" uses it to show heads dividing the work among themselves
(section 3.2.2 of Vaswani et al. (2017): multiple heads let the model "jointly attend to
information from different representation subspaces at different positions").

The task: a sequence of letters goes in; at every position the model must report four facts,
each found at a *different* place in the sequence:

===============  =====================================  ============================
fact             answer at position ``t``               where a head must look
===============  =====================================  ============================
``previous``     the letter at ``t - 1``                one step back (by position)
``next``         the letter at ``t + 1``                one step ahead (by position)
``first``        the letter at position 0               the start (by position)
``largest``      the latest letter in the alphabet      the largest letter (by content)
===============  =====================================  ============================

The model is a single multi-head attention layer between an embedding and four linear
read-outs: no feed-forward network, no residual, no normalisation. One attention head averages
the values it looks at, so it cannot report two letters from two places at once; four facts
need four places, hence heads.
"""

import string
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from transformer_tutorial.model.draws import normal
from transformer_tutorial.model.multi_head import MultiHeadAttention, MultiHeadConfig
from transformer_tutorial.model.optim import Adam
from transformer_tutorial.studies.records import AttentionRecord
from transformer_tutorial.studies.reproducible import reproducible_training

__all__ = [
    "ALPHABET",
    "TASKS",
    "ToyBatch",
    "ToyConfig",
    "ToyModel",
    "ToyTraining",
    "attention_record",
    "encode",
    "head_task_weights",
    "make_batch",
    "task_accuracy",
    "train_toy_model",
]

ALPHABET = string.ascii_lowercase  # the vocabulary: token i is letter ALPHABET[i]
TASKS = ("previous", "next", "first", "largest")  # the four facts, in read-out order
IGNORE = -100  # target where a fact does not exist (no previous letter at t = 0)


@dataclass
class ToyConfig:
    """The model, the task and the training run; every default is what the chapter uses."""

    d_model: int = 64  # width of token vectors
    num_heads: int = 4  # heads of the one attention layer; d_k = d_model / num_heads
    max_len: int = 12  # longest sequence (size of the learned position table)
    min_len: int = 4  # shortest training sequence
    steps: int = 200  # optimiser steps
    batch_size: int = 64  # sequences per step
    learning_rate: float = 1e-2  # Adam
    seed: int = 0  # initial weights and training data

    def __post_init__(self) -> None:
        MultiHeadConfig(self.d_model, self.num_heads)  # heads must divide d_model
        if not 2 <= self.min_len <= self.max_len:
            raise ValueError(f"need 2 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
        for name in ("steps", "batch_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


@dataclass
class ToyBatch:
    tokens: torch.Tensor  # (B, T) letter ids
    targets: torch.Tensor  # (B, T, 4) letter id of each fact, IGNORE where it does not exist


def targets_for(tokens: torch.Tensor) -> torch.Tensor:
    """The four facts for every position of ``tokens`` ``(B, T)``: shape ``(B, T, 4)``."""
    batch, length = tokens.shape
    targets = torch.full((batch, length, len(TASKS)), IGNORE, dtype=torch.long)
    targets[:, 1:, 0] = tokens[:, :-1]  # previous: position t reports letter t - 1
    targets[:, :-1, 1] = tokens[:, 1:]  # next: position t reports letter t + 1
    targets[:, :, 2] = tokens[:, :1]  # first: (B, 1) broadcast over T
    targets[:, :, 3] = tokens.max(dim=1, keepdim=True).values  # largest: (B, 1) over T
    return targets


def make_batch(batch_size: int, length: int, generator: torch.Generator) -> ToyBatch:
    """``batch_size`` random sequences of ``length`` letters, with their targets."""
    if length < 2:
        raise ValueError(f"length must be at least 2 (previous and next need neighbours): {length}")
    tokens = torch.randint(len(ALPHABET), (batch_size, length), generator=generator)  # (B, T)
    return ToyBatch(tokens, targets_for(tokens))


def encode(text: str, max_len: int) -> torch.Tensor:
    """Letters of ``text`` as token ids ``(1, T)``; spaces are skipped, case is ignored."""
    letters = [character for character in text.lower() if not character.isspace()]
    unknown = sorted({character for character in letters if character not in ALPHABET})
    if unknown:
        raise ValueError(f"the toy model only knows the letters a-z; got {unknown}")
    if not 2 <= len(letters) <= max_len:
        raise ValueError(f"give between 2 and {max_len} letters, got {len(letters)}")
    return torch.tensor([[ALPHABET.index(character) for character in letters]])  # (1, T)


class ToyModel(nn.Module):
    """Letter embedding + learned position -> one multi-head attention layer -> 4 read-outs."""

    def __init__(self, config: ToyConfig):
        super().__init__()
        self.config = config
        generator = torch.Generator().manual_seed(config.seed)
        d_model = config.d_model
        self.letters = nn.Parameter(normal((len(ALPHABET), d_model), 1.0, generator))
        self.positions = nn.Parameter(normal((config.max_len, d_model), 1.0, generator))
        self.attention = MultiHeadAttention(
            MultiHeadConfig(d_model, config.num_heads), generator=generator
        )
        self.readout = nn.Parameter(  # one (D, 26) read-out matrix per fact
            normal((len(TASKS), d_model, len(ALPHABET)), d_model**-0.5, generator)
        )

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``tokens`` ``(B, T)`` -> logits ``(B, T, 4, 26)`` and weights ``(B, H, T, T)``."""
        if tokens.dim() != 2 or not 1 <= tokens.shape[1] <= self.config.max_len:
            raise ValueError(
                f"tokens must have shape (B, T) with 1 <= T <= {self.config.max_len}, "
                f"got {tuple(tokens.shape)}"
            )
        x = self.letters[tokens] + self.positions[: tokens.shape[1]]  # (B, T, D) + (T, D)
        mixed, weights = self.attention(x)  # (B, T, D), (B, H, T, T)
        logits = torch.einsum("btd,fdv->btfv", mixed, self.readout)  # (B, T, 4, 26)
        return logits, weights


@dataclass
class ToyTraining:
    model: ToyModel
    losses: list[float] = field(default_factory=list)  # training loss after each step


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(
        logits.reshape(-1, len(ALPHABET)),  # (B, T, 4, 26) -> (B T 4, 26)
        targets.reshape(-1),  # (B, T, 4) -> (B T 4,)
        ignore_index=IGNORE,
    )


def train_toy_model(config: ToyConfig) -> ToyTraining:
    """Train a fresh :class:`ToyModel` with Adam on fresh random batches (seeded, CPU; in
    float64 on one thread, so the same config gives the same model: see
    :mod:`~transformer_tutorial.studies.reproducible`)."""
    model = ToyModel(config)
    generator = torch.Generator().manual_seed(config.seed + 1)
    training = ToyTraining(model)
    with reproducible_training(model):
        optimiser = Adam(
            model.parameters(), lr=config.learning_rate
        )  # = torch.optim.Adam, bit for bit
        for _ in range(config.steps):
            length = int(
                torch.randint(config.min_len, config.max_len + 1, (1,), generator=generator)
            )
            batch = make_batch(config.batch_size, length, generator)
            logits, _ = model(batch.tokens)
            loss = _loss(logits, batch.targets)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            training.losses.append(loss.item())
    model.eval()
    return training


def _test_batch(config: ToyConfig, batch_size: int, seed: int) -> ToyBatch:
    return make_batch(batch_size, config.max_len, torch.Generator().manual_seed(seed))


@torch.no_grad()
def task_accuracy(model: ToyModel, batch_size: int = 512, seed: int = 12345) -> dict[str, float]:
    """Fraction of right answers per fact, on fresh sequences of ``max_len`` letters."""
    batch = _test_batch(model.config, batch_size, seed)
    logits, _ = model(batch.tokens)
    predictions = logits.argmax(dim=-1)  # (B, T, 4)
    valid = batch.targets != IGNORE  # (B, T, 4)
    right = (predictions == batch.targets) & valid
    return {
        task: float(right[..., index].sum() / valid[..., index].sum())
        for index, task in enumerate(TASKS)
    }


@torch.no_grad()
def head_task_weights(model: ToyModel, batch_size: int = 512, seed: int = 12345) -> np.ndarray:
    """How much attention each head puts where each fact lives: shape ``(H, 4)``.

    Entry ``[h, f]`` is head ``h``'s weight on the position(s) holding fact ``f`` (``t - 1``,
    ``t + 1``, position 0, every position holding the largest letter), averaged over the
    queries where the fact exists. A head that has specialised in a fact scores near 1 there.
    """
    batch = _test_batch(model.config, batch_size, seed)
    _, weights = model(batch.tokens)  # (B, H, T, T)
    length = batch.tokens.shape[1]
    query = torch.arange(length)[:, None]  # (T, 1)
    key = torch.arange(length)[None, :]  # (1, T)
    where = torch.stack(
        [
            (key == query - 1).expand(batch.tokens.shape[0], length, length),
            (key == query + 1).expand(batch.tokens.shape[0], length, length),
            (key == 0).expand(batch.tokens.shape[0], length, length),
            (batch.tokens == batch.tokens.max(dim=1, keepdim=True).values)[:, None, :].expand(
                -1, length, -1
            ),
        ],
        dim=1,
    )  # (B, 4, T, S): True where fact f lives for query t
    exists = where.any(dim=-1)  # (B, 4, T): previous/next do not exist at the ends
    on_fact = torch.einsum("bhts,bfts->bhft", weights, where.float())  # (B, H, 4, T)
    mean = (on_fact * exists[:, None]).sum(dim=(0, 3)) / exists.sum(dim=(0, 2))  # (H, 4)
    return mean.numpy()


@torch.no_grad()
def attention_record(model: ToyModel, text: str, label: str | None = None):
    """The model's attention on ``text`` as an ``AttentionRecord`` for the heatmap explorer.

    One layer, ``H`` heads; tokens are the letters of ``text`` (spaces skipped).
    """
    tokens = encode(text, model.config.max_len)  # (1, T)
    _, weights = model(tokens)  # (1, H, T, T)
    return AttentionRecord(
        label=text if label is None else label,
        tokens=[ALPHABET[index] for index in tokens[0].tolist()],
        weights=weights.double().numpy(),  # (1, H, T, T) = (layers, heads, T, S)
        layer_names=["attention layer"],
    )
