"""What chapter 1 measures: the three problems that made the Transformer replace recurrence.

1. Gradients vanish or explode: backpropagation through time multiplies one Jacobian per step,
   ``dh_t / dh_(t-1) = diag(f'(a_t)) W_hh``, so ``dh_T / dh_t`` is a product of ``T - t`` of
   them (Bengio, Simard & Frasconi 1994; Pascanu, Mikolov & Bengio 2013, section 2).
2. Distant words are hard to use: a recall task whose answer lies ``N`` tokens back, learned by
   an RNN, an LSTM (Hochreiter & Schmidhuber 1997), a GRU (Cho et al. 2014) and one attention
  layer.
3. Nothing runs in parallel: Vaswani et al. (2017), section 1 (recurrence "precludes
   parallelization within training examples") and section 4, Table 1 (per-layer complexity,
   sequential operations and maximum path length of self-attention, recurrent and
   convolutional layers), each measured.

The RNN itself is :mod:`transformer_tutorial.model.rnn`. Shapes use the package letters with
three additions: ``E`` is the width of an RNN's inputs, ``D`` the width of its hidden state
(the RNN's ``d_model``), ``C`` a number of classes. Everything that draws random numbers takes a
``torch.Generator``.
"""

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from transformer_tutorial.model.checks import check_positive_int
from transformer_tutorial.model.draws import float64_draws
from transformer_tutorial.model.optim import Adam
from transformer_tutorial.model.positions import PositionalConfig, SinusoidalPositionalEncoding
from transformer_tutorial.model.rnn import RNNConfig, TanhRNN, torch_gru, torch_lstm, torch_rnn
from transformer_tutorial.studies.reproducible import reproducible_training

__all__ = [
    "AttentionClassifier",
    "AttentionClassifierConfig",
    "RecallBatch",
    "RecallTaskConfig",
    "RecurrentClassifier",
    "RecurrentClassifierConfig",
    "TimingResult",
    "TrainConfig",
    "accuracy_by_distance",
    "answer_gradient_norms",
    "attention_layer_flops",
    "conv_layer_flops",
    "convolution_layers_needed",
    "geometric_rate",
    "graph_depth",
    "hidden_state_jacobian_norms",
    "jacobian_norms_by_length",
    "layer_graph_depth",
    "loop_vs_matrix_timings",
    "measured_receptive_field",
    "recall_batch",
    "receptive_field",
    "recurrent_layer_flops",
    "step_jacobians",
    "time_call",
    "train_classifier",
]


def step_jacobians(
    rnn: TanhRNN, inputs: torch.Tensor, h0: torch.Tensor | None = None
) -> torch.Tensor:
    """The one-step Jacobians ``A_t = dh_t / dh_(t-1)``, ``t = 1 .. T``, measured with autograd.

    For tanh, ``A_t = diag(1 - h_t^2) W_hh`` (Pascanu et al. 2013, section 2). ``inputs`` is one
    sequence ``(T, E)``; the result ``(T, D, D)`` is float64, so tiny products stay representable.
    """
    _check_one_sequence(rnn, inputs)
    rnn, inputs = _float64_copy(rnn), inputs.double()
    length, hidden = inputs.shape[0], rnn.config.hidden_size
    with torch.no_grad():  # one forward pass gives the states h_0 .. h_T
        states = rnn.hidden_states(inputs[None], None if h0 is None else h0.double()[None])
    # Re-run every step from its known h_(t-1), all steps at once and D times over:
    # copy i of step t sends back the gradient of h_t[i] alone, which is row i of A_t.
    h_prev = torch.cat(states[:-1])  # T x (1, D) -> (T, D): h_0 .. h_(T-1)
    h_prev = h_prev[:, None].expand(length, hidden, hidden).clone().requires_grad_(True)
    x = inputs[:, None].expand(length, hidden, inputs.shape[1])  # (T, E) -> (T, D, E)
    h_next = rnn.step(x, h_prev)  # (T, D, D): copy i of step t holds h_t
    picked = (h_next * torch.eye(hidden, dtype=torch.float64)).sum()  # sum of h_t[i] in copy i
    (jacobians,) = torch.autograd.grad(picked, h_prev)  # [t - 1, i] = d h_t[i] / d h_(t-1)
    return jacobians  # (T, D, D)


def jacobian_norms_by_length(
    rnn: TanhRNN, inputs: torch.Tensor, lengths: Sequence[int]
) -> dict[int, np.ndarray]:
    """:func:`hidden_state_jacobian_norms` for every prefix length ``T`` in ``lengths`` at once.

    ``dh_T / dh_(T-k) = A_T A_(T-1) ... A_(T-k+1)`` (the chain rule, one factor per step), built
    from :func:`step_jacobians` of one forward pass over the longest prefix.
    """
    if len(lengths) == 0 or any(not 1 <= length <= inputs.shape[0] for length in lengths):
        raise ValueError(f"lengths must be non-empty and in 1..{inputs.shape[0]}, got {lengths}")
    factors = step_jacobians(rnn, inputs[: max(lengths)])  # (T, D, D)
    identity = torch.eye(rnn.config.hidden_size, dtype=torch.float64)
    result = {}
    for length in lengths:
        product, products = identity, [identity]
        for t in range(length, 0, -1):  # k = 1 .. T: multiply in A_(T-k+1) on the right
            product = product @ factors[t - 1]
            products.append(product)
        result[int(length)] = torch.linalg.matrix_norm(torch.stack(products), ord=2).numpy()
    return result


def hidden_state_jacobian_norms(
    rnn: TanhRNN, inputs: torch.Tensor, h0: torch.Tensor | None = None
) -> np.ndarray:
    """``norms[k] = ||dh_T / dh_(T-k)||_2`` for ``k = 0 .. T``, measured with autograd.

    ``inputs``: one sequence ``(T, E)``. The norm is the largest singular value of the
    Jacobian: the most a gradient arriving at ``h_T`` can be stretched (or the least it is
    shrunk) on its way back ``k`` steps to ``h_(T-k)``. ``norms[0] = 1`` (the identity).

    Computed in float64 so that tiny and huge values stay representable. One backward pass
    gives the whole Jacobian: the sequence is copied ``D`` times and copy ``i`` sends back
    the gradient of ``h_T[i]`` alone.
    """
    _check_one_sequence(rnn, inputs)
    hidden = rnn.config.hidden_size
    copy = _float64_copy(rnn)
    batch = inputs.double().expand(hidden, *inputs.shape)  # (T, E) -> (D, T, E): D copies
    if h0 is None:
        h0 = torch.zeros(hidden, dtype=torch.float64)
    start = h0.double().expand(hidden, hidden).clone().requires_grad_(True)  # (D, D)
    states = copy.hidden_states(batch, start)  # T + 1 tensors (D, D)
    picked = (states[-1] * torch.eye(hidden, dtype=torch.float64)).sum()  # sum_i h_T[i] of copy i
    rows = torch.autograd.grad(picked, states)  # rows[t][i] = d h_T[i] / d h_t
    jacobians = torch.stack(rows[::-1])  # (T + 1, D, D), index k = T - t
    return torch.linalg.matrix_norm(jacobians, ord=2).numpy()


def _check_one_sequence(rnn: TanhRNN, inputs: torch.Tensor) -> None:
    if inputs.dim() != 2 or inputs.shape[-1] != rnn.config.input_size:
        raise ValueError(
            f"inputs must be one sequence of shape (T, {rnn.config.input_size}), "
            f"got {tuple(inputs.shape)}"
        )


def _float64_copy(rnn: TanhRNN) -> TanhRNN:
    copy = TanhRNN(rnn.config).double()  # (its random initial weights are overwritten)
    copy.load_state_dict(rnn.state_dict())
    return copy


def geometric_rate(norms: Sequence[float] | np.ndarray, start: int = 1) -> float:
    """The ``rho`` of the best fit ``norms[k] ~ c rho^k`` (least squares on ``log norms``).

    Fits from distance ``start`` on. ``rho < 1`` means a gradient shrinks by that factor per
    step back in time; ``rho > 1`` means it grows.
    """
    norms = np.asarray(norms, dtype=float)
    if norms.ndim != 1:
        raise ValueError(f"norms must be 1-D (one value per distance), got shape {norms.shape}")
    if not 0 <= start <= len(norms) - 2:
        raise ValueError(f"need at least two norms from start={start}, got {len(norms)} in all")
    tail = norms[start:]
    if not np.all(np.isfinite(tail)) or np.any(tail <= 0):
        raise ValueError("norms must be positive and finite to fit a geometric rate")
    distances = np.arange(start, len(norms))
    slope, _ = np.polyfit(distances, np.log(tail), 1)
    return float(np.exp(slope))


@dataclass
class RecallTaskConfig:
    """Sequences of filler tokens with one answer token ``N`` positions before the question.

    Token ids: ``0 .. n_answers - 1`` are answers (think "Nepal", "Peru", ...),
    the next ``n_fillers`` are distractors (the words in between), the last id is the
    question token that ends every sequence. The target is the answer token's id.
    """

    n_answers: int = 8  # C: classes to choose from; chance accuracy is 1 / n_answers
    n_fillers: int = 16  # distinct distractor tokens
    length: int = 41  # T: tokens per sequence, the question included
    min_distance: int = 1  # N is drawn uniformly from min_distance .. max_distance
    max_distance: int = 40  # at most length - 1 (the answer must fit before the question)

    def __post_init__(self) -> None:
        for name in ("n_answers", "n_fillers", "length", "min_distance", "max_distance"):
            check_positive_int(name, getattr(self, name))
        if self.length < 2:
            raise ValueError(f"length must be at least 2 (answer + question), got {self.length}")
        if not self.min_distance <= self.max_distance <= self.length - 1:
            raise ValueError(
                f"need 1 <= min_distance <= max_distance <= length - 1 = {self.length - 1}, got "
                f"min_distance={self.min_distance}, max_distance={self.max_distance}"
            )

    @property
    def vocab_size(self) -> int:
        return self.n_answers + self.n_fillers + 1

    @property
    def question_token(self) -> int:
        return self.vocab_size - 1


@dataclass
class RecallBatch:
    tokens: torch.Tensor  # (B, T) int64 token ids, the question token last
    targets: torch.Tensor  # (B,) int64, the answer's id = the class to predict
    distances: torch.Tensor  # (B,) int64, N: the answer sits at position T - 1 - N


def recall_batch(
    config: RecallTaskConfig,
    batch_size: int,
    generator: torch.Generator,
    distance: int | None = None,
) -> RecallBatch:
    """``batch_size`` sequences of random fillers, each with its answer ``N`` positions before
    the question token that ends it. ``N`` is drawn uniformly unless ``distance`` fixes it."""
    _check_recall_batch(config, batch_size, distance)
    length = config.length  # T
    fillers = torch.randint(config.n_fillers, (batch_size, length), generator=generator)
    tokens = config.n_answers + fillers  # (B, T): filler ids follow the answer ids
    targets = torch.randint(config.n_answers, (batch_size,), generator=generator)  # (B,)
    if distance is None:
        distances = torch.randint(
            config.min_distance, config.max_distance + 1, (batch_size,), generator=generator
        )  # (B,)
    else:
        distances = torch.full((batch_size,), distance, dtype=torch.int64)  # (B,)
    rows = torch.arange(batch_size)
    tokens[rows, length - 1 - distances] = targets  # the answer, N positions before the end
    tokens[:, -1] = config.question_token
    return RecallBatch(tokens=tokens, targets=targets, distances=distances)


def _check_recall_batch(config: RecallTaskConfig, batch_size: int, distance: int | None) -> None:
    check_positive_int("batch_size", batch_size)
    if distance is not None and not config.min_distance <= distance <= config.length - 1:
        raise ValueError(
            f"distance must be in {config.min_distance}..{config.length - 1}, got {distance!r}"
        )


@dataclass
class RecurrentClassifierConfig:
    """Embedding -> one recurrent layer -> the last hidden state -> class scores."""

    vocab_size: int = 25  # tokens the embedding knows (RecallTaskConfig().vocab_size)
    n_classes: int = 8  # C
    embedding_size: int = 16  # E
    hidden_size: int = 32  # D
    kind: Literal["rnn", "lstm", "gru"] = "rnn"  # nn.RNN (tanh), nn.LSTM or nn.GRU

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_classes", "embedding_size", "hidden_size"):
            check_positive_int(name, getattr(self, name))
        if self.kind not in ("rnn", "lstm", "gru"):
            raise ValueError(f"kind must be 'rnn', 'lstm' or 'gru', got {self.kind!r}")


def _check_tokens(tokens: torch.Tensor, vocab_size: int, max_len: int | None = None) -> None:
    if tokens.dim() != 2 or tokens.dtype != torch.int64:
        raise ValueError(
            f"tokens must be int64 ids of shape (B, T), got {tuple(tokens.shape)} {tokens.dtype}"
        )
    if tokens.shape[1] == 0:
        raise ValueError("tokens hold an empty sequence (T = 0)")
    if max_len is not None and tokens.shape[1] > max_len:
        raise ValueError(f"sequence length T={tokens.shape[1]} is longer than max_len={max_len}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"token ids must be in 0..{vocab_size - 1}")


class RecurrentClassifier(nn.Module):
    """Reads the sequence left to right; everything it knows at the end is in ``h_T``.

    ``seed`` fixes the initial weights without touching PyTorch's global generator.
    """

    def __init__(self, config: RecurrentClassifierConfig, seed: int = 0):
        super().__init__()
        self.config = config
        # PyTorch's layers draw from the global generator: seed a copy of it, and draw in float64
        with torch.random.fork_rng(devices=[]), float64_draws():
            torch.manual_seed(seed)
            self.embedding = nn.Embedding(config.vocab_size, config.embedding_size)
            sizes = RNNConfig(config.embedding_size, config.hidden_size)
            layers = {"rnn": torch_rnn, "lstm": torch_lstm, "gru": torch_gru}
            self.recurrent = layers[config.kind](sizes)
            self.classify = nn.Linear(config.hidden_size, config.n_classes)
        self.float()  # the same float32 weights on every processor

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``(B, T)`` -> class scores ``(B, C)``."""
        _check_tokens(tokens, self.config.vocab_size)
        outputs, _ = self.recurrent(self.embedding(tokens))  # (B, T) -> (B, T, E) -> (B, T, D)
        return self.classify(outputs[:, -1])  # (B, D) -> (B, C)


@dataclass
class AttentionClassifierConfig:
    """Embedding + sinusoidal positions -> one self-attention layer -> last position -> scores."""

    vocab_size: int = 25  # tokens the embedding knows
    n_classes: int = 8  # C
    d_model: int = 32  # D: width of token vectors, queries, keys and values
    max_len: int = 256  # L: longest sequence the position table covers

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_classes", "d_model", "max_len"):
            check_positive_int(name, getattr(self, name))


class AttentionClassifier(nn.Module):
    """A single head of scaled dot-product attention (paper equation 1) over the whole sequence.

    The output at the last position (the question token) is a weighted average of *every*
    position's value, so the answer is one step away however far back it stands.
    ``W_Q`` starts at zero, so every position starts with the same weight ``1 / T``: a
    position the softmax ignored from the start would get almost no gradient.
    """

    def __init__(self, config: AttentionClassifierConfig, seed: int = 0):
        super().__init__()
        self.config = config
        self.positions = SinusoidalPositionalEncoding(
            PositionalConfig(d_model=config.d_model, max_len=config.max_len)
        )
        # PyTorch's layers draw from the global generator: seed a copy of it, and draw in float64
        with torch.random.fork_rng(devices=[]), float64_draws():
            torch.manual_seed(seed)
            self.embedding = nn.Embedding(config.vocab_size, config.d_model)
            self.query = nn.Linear(config.d_model, config.d_model)  # W_Q (D, K) with K = D
            self.key = nn.Linear(config.d_model, config.d_model)  # W_K
            self.value = nn.Linear(config.d_model, config.d_model)  # W_V
            self.classify = nn.Linear(config.d_model, config.n_classes)
        self.float()  # the same float32 weights on every processor
        with torch.no_grad():  # start by attending uniformly: every score 0, every weight 1/T,
            self.query.weight.zero_()  # so no position's gradient starts out saturated away
            self.query.bias.zero_()

    def _project(self, tokens: torch.Tensor):
        _check_tokens(tokens, self.config.vocab_size, self.config.max_len)
        x = self.positions(self.embedding(tokens))  # (B, T) -> (B, T, D)
        return self.query(x), self.key(x), self.value(x)  # (B, T, D) each

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``(B, T)`` -> class scores ``(B, C)``, read at the last position."""
        queries, keys, values = self._project(tokens)
        attended = F.scaled_dot_product_attention(queries, keys, values)  # (B, T, D)
        return self.classify(attended[:, -1])  # (B, D) -> (B, C)

    def attention_weights(self, tokens: torch.Tensor) -> torch.Tensor:
        """``softmax(Q K^T / sqrt(d_k))``, ``(B, T, S)``: row ``t`` = where position ``t`` looks."""
        queries, keys, _ = self._project(tokens)
        scores = queries @ keys.transpose(1, 2) / math.sqrt(self.config.d_model)  # (B, T, S)
        return scores.softmax(dim=-1)


@dataclass
class TrainConfig:
    """A short, seeded training run (Adam, cross-entropy)."""

    steps: int = 300  # optimisation steps, one fresh batch each
    batch_size: int = 64  # B
    learning_rate: float = 3e-3  # Adam's step size
    clip_norm: float = 1.0  # gradient-norm clipping, the usual guard against explosions

    def __post_init__(self) -> None:
        check_positive_int("steps", self.steps)
        check_positive_int("batch_size", self.batch_size)
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate!r}")
        if not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be positive, got {self.clip_norm!r}")


def train_classifier(
    model: nn.Module, task: RecallTaskConfig, train: TrainConfig, generator: torch.Generator
) -> list[float]:
    """Train ``model`` on fresh recall batches with Adam and cross-entropy, the gradient's norm
    clipped (Pascanu et al. 2013, section 3.2); returns the loss of every step. Trains in
    float64 on one thread: see :mod:`~transformer_tutorial.studies.reproducible`."""
    losses = []
    model.train()
    with reproducible_training(model):
        # the book's Adam (model/optim.py): torch.optim.Adam's steps, bit for bit
        optimiser = Adam(model.parameters(), lr=train.learning_rate)
        for _ in range(train.steps):
            batch = recall_batch(task, train.batch_size, generator)
            scores = model(batch.tokens)  # (B, T) -> (B, C)
            loss = F.cross_entropy(scores, batch.targets)
            optimiser.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), train.clip_norm)
            optimiser.step()
            losses.append(loss.item())
    model.eval()
    return losses


def _check_distances(distances: Sequence[int], n_per_distance: int) -> None:
    check_positive_int("n_per_distance", n_per_distance)
    if len(distances) == 0:
        raise ValueError("distances is empty: give at least one distance")


@torch.no_grad()
def accuracy_by_distance(
    model: nn.Module,
    task: RecallTaskConfig,
    distances: Sequence[int],
    n_per_distance: int,
    generator: torch.Generator,
) -> np.ndarray:
    """Fraction of fresh sequences answered correctly, one value per distance ``N``."""
    _check_distances(distances, n_per_distance)
    model.eval()
    accuracies = []
    for distance in distances:
        batch = recall_batch(task, n_per_distance, generator, distance=int(distance))
        predictions = model(batch.tokens).argmax(dim=-1)  # (B, C) -> (B,)
        accuracies.append((predictions == batch.targets).double().mean().item())
    return np.array(accuracies)


def answer_gradient_norms(
    model: RecurrentClassifier,
    task: RecallTaskConfig,
    distances: Sequence[int],
    n_per_distance: int,
    generator: torch.Generator,
) -> np.ndarray:
    """The learning signal that reaches the answer: the mean norm of ``d loss / d x``, the
    gradient of the cross-entropy with respect to the answer token's input vector, per distance
    ``N`` (the gradient crosses ``N`` recurrent steps on its way back)."""
    _check_distances(distances, n_per_distance)
    model.eval()
    norms = []
    for distance in distances:
        batch = recall_batch(task, n_per_distance, generator, distance=int(distance))
        inputs = model.embedding(batch.tokens).detach().requires_grad_(True)  # (B, T, E)
        outputs, _ = model.recurrent(inputs)  # (B, T, D)
        loss = F.cross_entropy(model.classify(outputs[:, -1]), batch.targets, reduction="sum")
        (gradient,) = torch.autograd.grad(loss, inputs)  # (B, T, E): one row per example
        at_answer = gradient[:, task.length - 1 - int(distance)]  # (B, E)
        norms.append(at_answer.norm(dim=-1).mean().item())
    return np.array(norms)


def time_call(function: Callable[[], object], repeats: int = 5) -> float:
    """Median wall time of ``repeats`` calls, in seconds (one untimed warm-up call first)."""
    check_positive_int("repeats", repeats)
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


@dataclass
class TimingResult:
    lengths: np.ndarray  # (n,) sequence lengths T
    loop_seconds: np.ndarray  # (n,) the RNN: T dependent steps, one after another
    matrix_seconds: np.ndarray  # (n,) self-attention: all positions in a few matrix products

    @property
    def ratio(self) -> np.ndarray:
        """How many times longer the loop takes than the matrix form, per length."""
        return self.loop_seconds / self.matrix_seconds


@torch.no_grad()
def loop_vs_matrix_timings(
    lengths: Sequence[int],
    width: int = 64,
    batch_size: int = 8,
    repeats: int = 5,
    generator: torch.Generator | None = None,
) -> TimingResult:
    """Wall time of one RNN layer (loop over ``T`` steps) and one self-attention layer
    (``Q = X W_Q`` ... ``softmax(Q K^T / sqrt(D)) V`` for all positions at once) on the same
    input ``(B, T, D)``. Both have the same number of weights per projection, ``D x D``."""
    if len(lengths) == 0:
        raise ValueError("lengths is empty: give at least one sequence length")
    for length in lengths:
        check_positive_int("each length", length)
    check_positive_int("width", width)
    check_positive_int("batch_size", batch_size)
    rnn = TanhRNN(RNNConfig(width, width), generator=generator)
    projections = [
        torch.randn(width, width, generator=generator) / math.sqrt(width) for _ in range(3)
    ]  # W_Q, W_K, W_V (D, D)

    def attention(x: torch.Tensor) -> torch.Tensor:
        queries, keys, values = (x @ weight for weight in projections)  # (B, T, D) each
        scores = queries @ keys.transpose(1, 2) / math.sqrt(width)  # (B, T, S)
        return scores.softmax(dim=-1) @ values  # (B, T, S) @ (B, S, D) -> (B, T, D)

    loop, matrix = [], []
    for length in lengths:
        x = torch.randn(batch_size, length, width, generator=generator)  # (B, T, D)
        loop.append(time_call(lambda x=x: rnn(x), repeats))
        matrix.append(time_call(lambda x=x: attention(x), repeats))
    return TimingResult(np.array(lengths), np.array(loop), np.array(matrix))


def _count_flops(function: Callable[[], object]) -> int:
    with FlopCounterMode(display=False) as counter:
        function()
    return int(counter.get_total_flops())


@torch.no_grad()
def attention_layer_flops(length: int, width: int, projections: bool = True) -> int:
    """Floating-point operations of one self-attention layer (one head, width ``D``), counted by
    PyTorch's ``FlopCounterMode`` on real tensors ``(1, T, D)``.

    With ``projections`` (the whole layer): ``Q, K, V = X W_Q, X W_K, X W_V``, the core
    ``softmax(Q K^T) V`` and the output ``W_O``. Without: the core alone, the ``O(n^2 d)`` that
    Table 1 of the paper lists; the four projections add ``O(n d^2)``, like a recurrent layer."""
    check_positive_int("length", length)
    check_positive_int("width", width)
    x = torch.zeros(1, length, width)  # (B, T, D) with B = 1
    weight = torch.zeros(width, width)  # W_Q, W_K, W_V, W_O: (D, D); values do not change counts

    def layer() -> torch.Tensor:
        queries, keys, values = (x @ weight, x @ weight, x @ weight) if projections else (x, x, x)
        attended = (queries @ keys.transpose(1, 2)).softmax(-1) @ values  # (B, T, D)
        return attended @ weight if projections else attended

    return _count_flops(layer)


@torch.no_grad()
def recurrent_layer_flops(
    length: int, width: int, kind: Literal["rnn", "gru", "lstm"] = "rnn"
) -> int:
    """Operations of one recurrent layer (input and hidden width ``D``) over ``T`` steps: the
    tanh RNN (two ``D x D`` products per step), a GRU (six) or an LSTM (eight), run step by step
    so that ``FlopCounterMode`` sees every product (it does not look inside fused ``nn.LSTM``)."""
    check_positive_int("length", length)
    check_positive_int("width", width)
    if kind not in ("rnn", "gru", "lstm"):
        raise ValueError(f"kind must be 'rnn', 'gru' or 'lstm', got {kind!r}")
    inputs = torch.zeros(1, length, width)  # (B, T, E) with B = 1, E = D
    if kind == "rnn":
        rnn = TanhRNN(RNNConfig(width, width), generator=torch.Generator().manual_seed(0))
        return _count_flops(lambda: rnn(inputs))
    with torch.random.fork_rng(devices=[]):  # the weights' values do not change the count
        cell = nn.GRUCell(width, width) if kind == "gru" else nn.LSTMCell(width, width)

    def run() -> None:
        state = None
        for t in range(length):  # one step after another, as the layer runs
            state = cell(inputs[:, t], state)

    return _count_flops(run)


@torch.no_grad()
def conv_layer_flops(length: int, width: int, kernel_size: int) -> int:
    """Operations of one 1-D convolution layer, ``D`` channels in and out, kernel ``k``."""
    for name, value in (("length", length), ("width", width), ("kernel_size", kernel_size)):
        check_positive_int(name, value)
    with torch.random.fork_rng(devices=[]):  # the weights' values do not change the count
        conv = nn.Conv1d(width, width, kernel_size, padding="same", bias=False)
    inputs = torch.zeros(1, width, length)  # (B, D, T): Conv1d wants channels first
    return _count_flops(lambda: conv(inputs))


def graph_depth(output: torch.Tensor) -> int:
    """The longest chain of operations in ``output``'s autograd graph: how many steps must run
    one after another, however many processors are available (the paper's "sequential
    operations")."""
    if output.grad_fn is None:
        raise ValueError(
            "output has no autograd graph: compute it from a tensor with requires_grad"
        )
    depth: dict[object, int] = {}
    stack = [(output.grad_fn, False)]
    while stack:  # iterative post-order walk: an RNN's graph is deeper than Python's recursion
        node, expanded = stack.pop()
        if node in depth:
            continue
        children = [child for child, _ in node.next_functions if child is not None]
        if expanded:
            depth[node] = 1 + max((depth[child] for child in children), default=0)
        else:
            stack.append((node, True))
            stack += [(child, False) for child in children if child not in depth]
    return depth[output.grad_fn]


def layer_graph_depth(
    kind: Literal["self-attention", "recurrent", "convolutional"],
    length: int,
    width: int = 8,
    kernel_size: int = 3,
) -> int:
    """:func:`graph_depth` of one layer of the given kind on an input ``(1, T, D)``."""
    check_positive_int("length", length)
    check_positive_int("width", width)
    inputs = torch.zeros(1, length, width, requires_grad=True)  # (B, T, D)
    weight = torch.full((width, width), 0.1)  # (D, D), the values do not matter here
    if kind == "self-attention":
        queries, keys, values = inputs @ weight, inputs @ weight, inputs @ weight  # (B, T, D)
        scores = queries @ keys.transpose(1, 2) / math.sqrt(width)  # (B, T, S)
        output = scores.softmax(dim=-1) @ values  # (B, T, D)
    elif kind == "recurrent":
        rnn = TanhRNN(RNNConfig(width, width), generator=torch.Generator().manual_seed(0))
        output, _ = rnn(inputs)  # (B, T, D)
    elif kind == "convolutional":
        check_positive_int("kernel_size", kernel_size)
        with torch.random.fork_rng(devices=[]):
            conv = nn.Conv1d(width, width, kernel_size, padding="same")
        output = conv(inputs.transpose(1, 2))  # (B, T, D) -> (B, D, T) -> (B, D, T)
    else:
        raise ValueError(
            f"kind must be 'self-attention', 'recurrent' or 'convolutional', got {kind!r}"
        )
    return graph_depth(output)


def receptive_field(kernel_size: int, layers: int, dilation_growth: int = 1) -> int:
    """Input positions one output of a stack of 1-D convolutions can see.

    Layer ``l`` (from 0) has dilation ``dilation_growth^l``; each adds
    ``(kernel_size - 1) * dilation`` positions. Without dilation (growth 1) the field grows
    linearly, ``1 + L (k - 1)``; with growth ``k`` it reaches ``k^L`` (ByteNet, WaveNet).
    """
    check_positive_int("kernel_size", kernel_size)
    check_positive_int("layers", layers)
    check_positive_int("dilation_growth", dilation_growth)
    if kernel_size < 2:
        raise ValueError(f"kernel_size must be at least 2 to widen the field, got {kernel_size}")
    return 1 + (kernel_size - 1) * sum(dilation_growth**layer for layer in range(layers))


def measured_receptive_field(
    kernel_size: int, layers: int, dilation_growth: int = 1, length: int = 512
) -> int:
    """The same number, measured: stack real ``nn.Conv1d`` layers and count the input
    positions whose gradient reaches the last output (causal padding, all weights 1)."""
    field = receptive_field(kernel_size, layers, dilation_growth)  # validates the arguments
    check_positive_int("length", length)
    if field > length:
        raise ValueError(f"the receptive field ({field}) is wider than length={length}")
    stack = []
    for layer in range(layers):
        dilation = dilation_growth**layer
        stack += [nn.ConstantPad1d(((kernel_size - 1) * dilation, 0), 0.0)]  # causal: left pad
        with torch.random.fork_rng(devices=[]):  # leave the global generator alone
            conv = nn.Conv1d(1, 1, kernel_size, dilation=dilation, bias=False)
        nn.init.ones_(conv.weight)
        stack.append(conv)
    inputs = torch.zeros(1, 1, length, requires_grad=True)  # (B, channels, T)
    (gradient,) = torch.autograd.grad(nn.Sequential(*stack)(inputs)[0, 0, -1], inputs)
    return int((gradient != 0).sum())


def convolution_layers_needed(span: int, kernel_size: int, dilation_growth: int = 1) -> int:
    """The fewest stacked layers whose receptive field covers ``span`` positions."""
    check_positive_int("span", span)
    layers = 1
    while receptive_field(kernel_size, layers, dilation_growth) < span:
        layers += 1
    return layers
