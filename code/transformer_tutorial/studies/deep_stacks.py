"""Deep stacks of sub-layers with and without Add & Norm: what the residual path and LayerNorm
are for, measured.

Sources:

- Vaswani et al. (2017), section 3.1: every sub-layer is wrapped as ``LayerNorm(x + Sublayer(x))``
  (post-LN); section 5.3: Adam with ``beta_1 = 0.9``, ``beta_2 = 0.98``, ``eps = 1e-9`` and a
  learning rate that warms up linearly over the first 4000 steps.
- He et al. (2016): the residual connection ``x + F(x)`` gives the gradient a path that skips
  ``F``, so very deep networks can be trained.
- Xiong et al. (2020), "On Layer Normalization in the Transformer Architecture": pre-LN,
  ``x + Sublayer(LayerNorm(x))``, trains without warm-up, where post-LN needs it.

:class:`DeepStack` stacks ``num_layers`` layers (self-attention and feed-forward sub-layers, or
feed-forward only) in one of five :data:`ARRANGEMENTS`, from no residual and no norm (``plain``)
to the paper's ``post-LN`` and ``pre-LN`` (tensor2tensor, 2018; made common by GPT-2).
:func:`input_gradient_norms` measures how much of a gradient arriving at the top of the stack
reaches its input; ``StackConfig(init="unit variance")`` gives a plain stack that keeps the size
of its signal, for a fair comparison. :func:`train_side_by_side` trains many copies of a small
classifier built on such a stack at once (different seeds and learning rates, same code path),
for the post-LN/pre-LN comparison of chapter "Add & Norm".
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F

from transformer_tutorial.model.attention import linear
from transformer_tutorial.model.checks import check_positive_int
from transformer_tutorial.model.draws import normal
from transformer_tutorial.model.feed_forward import FeedForward, FeedForwardConfig
from transformer_tutorial.model.multi_head import MultiHeadAttention, MultiHeadConfig
from transformer_tutorial.model.norm import LayerNorm, SublayerConfig, SublayerConnection
from transformer_tutorial.studies.reproducible import reproducible_training

__all__ = [
    "ARRANGEMENTS",
    "INITS",
    "SUBLAYERS",
    "Classifier",
    "DeepStack",
    "GradientProfile",
    "SideBySide",
    "StackConfig",
    "TeacherTask",
    "TrainingConfig",
    "branch_to_skip_ratios",
    "gradient_profile",
    "input_gradient_norms",
    "train_side_by_side",
    "warmup_factor",
]

ARRANGEMENTS: tuple[str, ...] = (
    "plain",  # x -> Sublayer(x): no residual, no norm
    "norm only",  # x -> LayerNorm(Sublayer(x)): no residual
    "residual only",  # x -> x + Sublayer(x): no norm
    "post-LN",  # x -> LayerNorm(x + Sublayer(x)): the paper, BERT
    "pre-LN",  # x -> x + Sublayer(LayerNorm(x)): tensor2tensor, GPT-2, most recent models
)
SUBLAYERS: tuple[str, ...] = ("attention+ffn", "ffn")  # an encoder layer, or its FFN alone
INITS: tuple[str, ...] = (
    "default",  # every linear layer uniform in +-1/sqrt(fan-in), as nn.Linear
    "unit variance",  # then each sub-layer's last linear layer rescaled: |output| = |input|
)


@dataclass
class StackConfig:
    """A stack of ``num_layers`` layers, each sub-layer wrapped in the same arrangement."""

    arrangement: str = "post-LN"  # one of ARRANGEMENTS
    num_layers: int = 12  # layers; each holds one sub-layer per kind in `sublayers`
    d_model: int = 32  # width D of the residual stream
    num_heads: int = 4  # heads of each self-attention sub-layer
    d_ff: int | None = None  # feed-forward hidden width; None: 4 x d_model
    sublayers: str = "attention+ffn"  # "attention+ffn" (an encoder layer) or "ffn"
    final_norm: bool | None = None  # LayerNorm after the last layer; None: for pre-LN only
    seed: int = 0  # initial weights
    init: str = "default"  # one of INITS: "default", or "unit variance" (rescaled, see DeepStack)

    def __post_init__(self) -> None:
        if self.arrangement not in ARRANGEMENTS:
            raise ValueError(f"arrangement must be one of {ARRANGEMENTS}, got {self.arrangement!r}")
        if self.sublayers not in SUBLAYERS:
            raise ValueError(f"sublayers must be one of {SUBLAYERS}, got {self.sublayers!r}")
        check_positive_int("num_layers", self.num_layers)
        check_positive_int("d_model", self.d_model)
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        check_positive_int("d_ff", self.d_ff)
        if self.sublayers == "attention+ffn":
            MultiHeadConfig(self.d_model, self.num_heads)  # heads must divide d_model
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")

    @property
    def uses_final_norm(self) -> bool:
        """Pre-LN leaves the residual stream un-normalised, so it ends with one LayerNorm."""
        return self.arrangement == "pre-LN" if self.final_norm is None else self.final_norm


class _Wrapped(nn.Module):
    """One sub-layer's connection in one of the :data:`ARRANGEMENTS`."""

    def __init__(self, arrangement: str, d_model: int):
        super().__init__()
        self.arrangement = arrangement
        self.connection = None
        if arrangement in ("norm only", "post-LN", "pre-LN"):
            config = SublayerConfig(d_model, norm_first=arrangement == "pre-LN")
            self.connection = SublayerConnection(config, residual=arrangement != "norm only")
        self.ratios: list[float] | None = None  # set to a list to record branch/skip ratios

    def forward(
        self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """``x`` ``(B, T, D)`` -> ``(B, T, D)``; ``sublayer`` keeps the shape ``(B, T, D)``."""
        if self.ratios is not None:
            normed = self.arrangement == "pre-LN"
            branch = sublayer(self.connection.norm(x) if normed else x)  # (B, T, D)
            self.ratios.append((branch.norm() / x.norm()).item())
        if self.connection is not None:
            return self.connection(x, sublayer)  # (B, T, D)
        if self.arrangement == "plain":
            return sublayer(x)  # (B, T, D)
        return x + sublayer(x)  # residual only: (B, T, D)


class StackLayer(nn.Module):
    """Self-attention (unless ``sublayers="ffn"``), then the feed-forward network, each wrapped."""

    def __init__(self, config: StackConfig, generator: torch.Generator):
        super().__init__()
        self.attention = None
        if config.sublayers == "attention+ffn":
            heads = MultiHeadConfig(config.d_model, config.num_heads)
            self.attention = MultiHeadAttention(heads, generator=generator)
            self.attention_block = _Wrapped(config.arrangement, config.d_model)
        ffn = FeedForwardConfig(config.d_model, config.d_ff)
        self.feed_forward = FeedForward(ffn, generator=generator)
        self.feed_forward_block = _Wrapped(config.arrangement, config.d_model)

    def _attend(self, x: torch.Tensor) -> torch.Tensor:
        # need_weights=True takes the softmax path: as fast here as the fused kernel, which
        # torch.func.vmap (used by train_side_by_side) can only run one sample at a time
        return self.attention(x, need_weights=True)[0]  # (B, T, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.attention is not None:
            x = self.attention_block(x, self._attend)  # (B, T, D)
        return self.feed_forward_block(x, self.feed_forward)  # (B, T, D)


class DeepStack(nn.Module):
    """``num_layers`` :class:`StackLayer` s, then a final LayerNorm if the config asks for one.

    Weights are drawn layer by layer from ``generator`` (default: seeded with ``config.seed``),
    so the first ``k`` layers of a deeper stack are exactly a ``k``-layer stack.

    With ``config.init == "unit variance"`` the weights are then rescaled, bottom to top, in
    the spirit of Mishkin and Matas (2016), "All you need is a good init": on a fixed
    calibration batch (standard normal, ``(8, 16, D)``, drawn from ``config.seed``), each
    sub-layer's last linear layer (``W_O`` of attention, ``W_2`` of the feed-forward network)
    is multiplied by the factor that makes the sub-layer's output exactly as large (same root
    mean square) as its input. A plain stack then keeps the size of the signal at every depth,
    so comparing it with the residual stacks is not a comparison with a stack that had already
    shrunk its signal to nothing.
    """

    def __init__(self, config: StackConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        if generator is None:
            generator = torch.Generator().manual_seed(config.seed)
        self.layers = nn.ModuleList(StackLayer(config, generator) for _ in range(config.num_layers))
        self.final_norm = LayerNorm(config.d_model) if config.uses_final_norm else None
        if config.init == "unit variance":
            self._rescale_to_unit_variance()

    @torch.no_grad()
    def _rescale_to_unit_variance(self) -> None:
        """Each sub-layer's output weights times ``|input| / |output|`` on the calibration
        batch, computed in float64, bottom to top (a sub-layer sees the rescaled ones below)."""
        generator = torch.Generator().manual_seed(20_000 + self.config.seed)
        shape = (8, 16, self.config.d_model)
        x = torch.randn(shape, generator=generator, dtype=torch.float64)  # (B, T, D)
        dtype = next(self.parameters()).dtype
        self.double()
        for wrapper, sublayer, last in self._sublayers():
            wrapper.ratios = []
            wrapper(x, sublayer)  # records |Sublayer(input)| / |input|, nothing else changes
            factor = 1.0 / wrapper.ratios.pop()
            wrapper.ratios = None
            last.weight.mul_(factor)
            if last.bias is not None:
                last.bias.mul_(factor)
            x = wrapper(x, sublayer)  # (B, T, D): the input of the next sub-layer
        self.to(dtype)

    def _sublayers(self):
        """``(wrapper, sub-layer, its last linear layer)``, bottom to top."""
        for layer in self.layers:
            if layer.attention is not None:
                yield layer.attention_block, layer._attend, layer.attention.W_O
            yield layer.feed_forward_block, layer.feed_forward, layer.feed_forward.W_2

    def finish(self, stream: torch.Tensor) -> torch.Tensor:
        """The stack's output for a residual-stream state: the final norm if there is one."""
        return self.final_norm(stream) if self.final_norm is not None else stream

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, T, D)`` -> ``(B, T, D)``."""
        return self.finish(self.residual_stream(x)[-1])

    def residual_stream(self, x: torch.Tensor, num_layers: int | None = None) -> list[torch.Tensor]:
        """The states ``(B, T, D)`` between layers, input first, before the final norm: through
        the first ``num_layers`` layers (default: all), so ``num_layers + 1`` of them."""
        if x.dim() != 3 or x.shape[-1] != self.config.d_model:
            raise ValueError(
                f"x must have shape (B, T, D) with D = {self.config.d_model}, got {tuple(x.shape)}"
            )
        if num_layers is None:
            num_layers = len(self.layers)
        if not 0 <= num_layers <= len(self.layers):
            raise ValueError(f"num_layers must be in 0..{len(self.layers)}, got {num_layers}")
        states = [x]
        for layer in self.layers[:num_layers]:
            states.append(layer(states[-1]))  # (B, T, D)
        return states

    def wrappers(self) -> list[_Wrapped]:
        """Every sub-layer's connection, bottom to top."""
        return [module for module in self.modules() if isinstance(module, _Wrapped)]


@dataclass
class GradientProfile:
    """How a gradient fares on its way down a stack, at several depths."""

    depths: tuple[int, ...]  # numbers of layers
    input_gradient: np.ndarray  # (len(depths),) |dL/dx| / |dL/dy| at the stack's input
    stream_std: np.ndarray  # (len(depths),) std of the residual stream after that many layers


def _check_depths(depths) -> tuple[int, ...]:
    depths = tuple(depths)
    if not depths:
        raise ValueError("depths is empty: give at least one number of layers")
    for depth in depths:
        check_positive_int("depths", depth)
    if list(depths) != sorted(set(depths)):
        raise ValueError(f"depths must be strictly increasing, got {depths}")
    return depths


def gradient_profile(
    stack: DeepStack,
    depths,
    batch_size: int = 8,
    length: int = 16,
    seed: int = 0,
    x: torch.Tensor | None = None,
) -> GradientProfile:
    """Send a gradient down ``stack`` from the output of each of ``depths`` layers.

    The input ``x`` ``(B, T, D)`` is standard normal of shape ``(batch_size, length, D)``
    unless given; a direction ``r`` of the same shape is standard normal; both are drawn from
    ``seed``. For the stack cut after ``L`` layers (its final norm, if any, applied there), the
    loss ``<output, r>`` has gradient ``r`` at the output; the returned ratio
    ``|dLoss/dx| / |r|`` is how much of it arrives at the input (1 for an identity map).
    """
    depths = _check_depths(depths)
    if depths[-1] > len(stack.layers):
        raise ValueError(f"depths go up to {depths[-1]}, the stack has {len(stack.layers)} layers")
    dtype = next(stack.parameters()).dtype
    generator = torch.Generator().manual_seed(seed)
    if x is None:
        for name, value in (("batch_size", batch_size), ("length", length)):
            check_positive_int(name, value)
        shape = (batch_size, length, stack.config.d_model)
        x = torch.randn(shape, generator=generator, dtype=dtype)  # (B, T, D)
    x = x.detach().to(dtype).requires_grad_()  # (B, T, D)
    direction = torch.randn(x.shape, generator=generator, dtype=dtype)  # (B, T, D)
    states = stack.residual_stream(x, depths[-1])  # depths[-1] + 1 states (B, T, D)
    ratios, stds = [], []
    for depth in depths:
        loss = (stack.finish(states[depth]) * direction).sum()
        (gradient,) = torch.autograd.grad(loss, x, retain_graph=True)  # (B, T, D)
        ratios.append((gradient.norm() / direction.norm()).item())
        stds.append(states[depth].std().item())
    return GradientProfile(depths, np.array(ratios), np.array(stds))


def input_gradient_norms(
    config: StackConfig, depths, batch_size: int = 8, length: int = 16
) -> GradientProfile:
    """:func:`gradient_profile` of a freshly initialised stack of ``config`` (its
    ``num_layers`` is replaced by ``max(depths)``), in float64 so that tiny gradients stay
    visible instead of rounding to zero. Inputs are drawn from ``config.seed``."""
    depths = _check_depths(depths)
    stack = DeepStack(replace(config, num_layers=depths[-1])).double()
    return gradient_profile(stack, depths, batch_size, length, seed=10_000 + config.seed)


@torch.no_grad()
def branch_to_skip_ratios(stack: DeepStack, x: torch.Tensor) -> np.ndarray:
    """For every sub-layer, bottom to top: ``|Sublayer(...)| / |x|``, the size of what the
    sub-layer adds compared with the residual stream ``x`` it is added to (its input; pre-LN
    feeds the sub-layer ``LayerNorm(x)``). Returns ``(num_layers * sub-layers per layer,)``."""
    wrappers = stack.wrappers()
    for wrapper in wrappers:
        wrapper.ratios = []
    try:
        stack(x)
        return np.array([ratio for wrapper in wrappers for ratio in wrapper.ratios])
    finally:
        for wrapper in wrappers:
            wrapper.ratios = None


@dataclass
class TeacherTask:
    """A synthetic task: every token is a random vector ``(d_in,)``, and its class is the
    largest of ``num_classes`` outputs of a fixed random "teacher" network
    ``tanh(tanh(x W_1) W_2) W_3``. Learnable, nonlinear, and endless fresh data."""

    d_in: int = 16  # width of the input vectors
    num_classes: int = 8  # classes; guessing costs ln(num_classes)
    hidden: int = 32  # teacher's hidden width
    seed: int = 1234  # teacher's weights
    weights: tuple[torch.Tensor, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("d_in", "num_classes", "hidden"):
            check_positive_int(name, getattr(self, name))
        generator = torch.Generator().manual_seed(self.seed)
        sizes = ((self.d_in, self.hidden, 2.0), (self.hidden, self.hidden, 2.0))
        sizes += ((self.hidden, self.num_classes, 1.0),)
        self.weights = tuple(
            normal((rows, columns), gain / math.sqrt(rows), generator)
            for rows, columns, gain in sizes
        )  # (d_in, hidden), (hidden, hidden), (hidden, classes)

    def label(self, x: torch.Tensor) -> torch.Tensor:
        """Classes ``(...)`` of the vectors ``x`` ``(..., d_in)``."""
        if x.dim() == 0 or x.shape[-1] != self.d_in:
            raise ValueError(f"x must have shape (..., d_in) = (..., {self.d_in}), got {x.shape}")
        w_1, w_2, w_3 = (weight.to(x.dtype) for weight in self.weights)  # float64 in training
        hidden = torch.tanh(torch.tanh(x @ w_1) @ w_2)  # (..., hidden)
        return (hidden @ w_3).argmax(dim=-1)  # (..., classes) -> (...)

    def batch(
        self, batch_size: int, length: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` ``(B, T, d_in)`` standard normal and its classes ``(B, T)``."""
        x = torch.randn(batch_size, length, self.d_in, generator=generator)  # (B, T, d_in)
        return x, self.label(x)

    def baseline_loss(self, samples: int = 100_000, seed: int = 0) -> float:
        """The loss of the best model that ignores its input: it predicts the class
        frequencies, so its cross-entropy is their entropy (``ln num_classes`` if balanced)."""
        _, labels = self.batch(samples, 1, torch.Generator().manual_seed(seed))  # (samples, 1)
        frequencies = torch.bincount(labels.flatten(), minlength=self.num_classes) / samples
        frequencies = frequencies[frequencies > 0]
        return float(-(frequencies * frequencies.log()).sum())


class Classifier(nn.Module):
    """Input projection ``d_in -> D``, a :class:`DeepStack`, read-out ``D -> num_classes``."""

    def __init__(self, stack: StackConfig, task: TeacherTask):
        super().__init__()
        generator = torch.Generator().manual_seed(stack.seed)
        self.embed = linear(task.d_in, stack.d_model, bias=True, generator=generator)
        self.stack = DeepStack(stack, generator=generator)
        self.readout = linear(stack.d_model, task.num_classes, bias=True, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, T, d_in)`` -> logits ``(B, T, num_classes)``."""
        return self.readout(self.stack(self.embed(x)))  # (B, T, d_in) -> (B, T, D) -> (B, T, C)


@dataclass
class TrainingConfig:
    """Many runs of the same training, one per (seed, learning rate, warm-up) combination."""

    learning_rates: tuple[float, ...] = (1e-3, 1e-2, 3e-2)  # peak rates, constant after warm-up
    seeds: tuple[int, ...] = (0, 1, 2)  # initial weights (and data) of each run
    warmup_steps: tuple[int, ...] = (
        0,
    )  # the rate ramps up linearly over these steps (paper: 4000)
    steps: int = 100  # Adam steps
    batch_size: int = 8  # sequences per step
    length: int = 8  # tokens per sequence
    betas: tuple[float, float] = (0.9, 0.98)  # Adam's beta_1, beta_2 (paper, section 5.3)
    eps: float = 1e-9  # Adam's epsilon (paper, section 5.3)

    def __post_init__(self) -> None:
        self.learning_rates, self.seeds = tuple(self.learning_rates), tuple(self.seeds)
        self.warmup_steps = tuple(self.warmup_steps)
        if not self.learning_rates or not all(rate > 0 for rate in self.learning_rates):
            raise ValueError(f"learning_rates must be positive, got {self.learning_rates}")
        for name in ("seeds", "warmup_steps"):
            values = getattr(self, name)
            if not values or not all(isinstance(v, int) and v >= 0 for v in values):
                raise ValueError(f"{name} must be non-negative ints, got {values}")
        for name in ("steps", "batch_size", "length"):
            check_positive_int(name, getattr(self, name))

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(seeds, learning rates, warm-ups)``: how the runs are laid out."""
        return len(self.seeds), len(self.learning_rates), len(self.warmup_steps)


def warmup_factor(step: int, warmup_steps: int) -> float:
    """Learning-rate multiplier at ``step`` (counted from 1): ``min(1, step / warmup_steps)``,
    or 1 without warm-up."""
    return 1.0 if warmup_steps == 0 else min(1.0, step / warmup_steps)


@dataclass
class SideBySide:
    """What :func:`train_side_by_side` trained."""

    stack: StackConfig
    task: TeacherTask
    training: TrainingConfig
    losses: np.ndarray  # (seeds, learning rates, warm-ups, steps): training loss of each step
    parameters: torch.Tensor = field(repr=False)  # (seeds x rates x warm-ups, M weights)

    def model(self, seed_index: int, rate_index: int, warmup_index: int = 0) -> Classifier:
        """The trained classifier of run (``seeds[seed_index]``, ``learning_rates[rate_index]``,
        ``warmup_steps[warmup_index]``)."""
        seeds, rates, warmups = self.training.shape
        if not (
            0 <= seed_index < seeds and 0 <= rate_index < rates and 0 <= warmup_index < warmups
        ):
            raise ValueError(
                f"need 0 <= seed_index < {seeds}, 0 <= rate_index < {rates} and "
                f"0 <= warmup_index < {warmups}"
            )
        model = Classifier(replace(self.stack, seed=self.training.seeds[seed_index]), self.task)
        row = self.parameters[(seed_index * rates + rate_index) * warmups + warmup_index]  # (P,)
        torch.nn.utils.vector_to_parameters(row.clone(), model.parameters())
        return model


def train_side_by_side(
    stack: StackConfig, task: TeacherTask, training: TrainingConfig
) -> SideBySide:
    """Train one :class:`Classifier` per (seed, learning rate, warm-up) on ``task``, all at once.

    Run ``(s, r, w)`` starts from the weights of seed ``s`` (the arrangement draws no random
    numbers, so post-LN and pre-LN stacks of the same seed start from the same weights) and sees
    the batches of seed ``s``; only the learning-rate schedule differs within a seed. Every run
    is the same as training that model alone with ``torch.optim.Adam(betas, eps)`` in float64
    (the tests check it); they are batched with ``torch.func.vmap`` over a ``(runs, M)`` matrix of
    flattened weights because one batched step costs far less than ``runs`` small ones on a CPU.
    """
    models = [Classifier(replace(stack, seed=seed), task) for seed in training.seeds]
    with reproducible_training(*models):  # float64, one thread (see reproducible.py)
        return _train_side_by_side(models, stack, task, training)


def _train_side_by_side(
    models: list[Classifier], stack: StackConfig, task: TeacherTask, training: TrainingConfig
) -> SideBySide:
    seeds, rates, warmups = training.seeds, training.learning_rates, training.warmup_steps
    per_seed = len(rates) * len(warmups)  # runs that share a seed: its weights and its data
    names = [name for name, _ in models[0].named_parameters()]
    shapes = [parameter.shape for parameter in models[0].parameters()]
    sizes = [parameter.numel() for parameter in models[0].parameters()]
    with torch.device("meta"):  # the same module without weights: vmap supplies them
        template = Classifier(stack, task)
    start = torch.stack([nn.utils.parameters_to_vector(model.parameters()) for model in models])
    flat = start.repeat_interleave(per_seed, dim=0).detach().requires_grad_()  # (runs, M)
    # run (s, r, w) is row (s R + r) W + w
    rate = torch.tensor(rates).repeat_interleave(len(warmups)).repeat(len(seeds))[:, None]
    warmup = torch.tensor(warmups).repeat(len(seeds) * len(rates))[:, None]  # (runs, 1)

    def run_loss(weights: torch.Tensor, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        parameters = {
            name: chunk.view(shape)
            for name, chunk, shape in zip(names, weights.split(sizes), shapes, strict=True)
        }
        logits = functional_call(template, parameters, (x,))  # (B, T, C)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())  # (B T, C), (B T,)

    batched_loss = vmap(run_loss)  # (runs, M), (runs, B, T, d_in), (runs, B, T) -> (runs,)
    generators = [torch.Generator().manual_seed(20_000 + seed) for seed in seeds]
    first_moment, second_moment = torch.zeros_like(flat), torch.zeros_like(flat)  # (runs, M)
    beta_1, beta_2 = training.betas
    losses = []
    for step in range(1, training.steps + 1):
        batches = [task.batch(training.batch_size, training.length, g) for g in generators]
        x = torch.stack([batch[0] for batch in batches])  # (S, B, T, d_in)
        labels = torch.stack([batch[1] for batch in batches])  # (S, B, T)
        x = x.repeat_interleave(per_seed, dim=0)  # (runs, B, T, d_in)
        labels = labels.repeat_interleave(per_seed, dim=0)  # (runs, B, T)
        loss = batched_loss(flat, x, labels)  # (runs,)
        (gradient,) = torch.autograd.grad(loss.sum(), flat)  # (runs, M): runs are independent
        losses.append(loss.detach())
        with torch.no_grad():  # Adam, written as torch.optim.Adam computes it
            first_moment.mul_(beta_1).add_(gradient, alpha=1 - beta_1)
            second_moment.mul_(beta_2).addcmul_(gradient, gradient, value=1 - beta_2)
            factor = torch.where(warmup > 0, (step / warmup.clamp(min=1)).clamp(max=1.0), 1.0)
            step_size = rate * factor / (1 - beta_1**step)  # (runs, 1)
            denominator = second_moment.sqrt() / math.sqrt(1 - beta_2**step) + training.eps
            flat.sub_(step_size * first_moment / denominator)
    curves = torch.stack(losses, dim=1).view(*training.shape, training.steps)  # (S, R, W, steps)
    return SideBySide(stack, task, training, curves.numpy(), flat.detach().float())
