"""How the paper trains: Adam written out, its learning-rate schedule and label smoothing.

Sources: Vaswani et al. (2017), section 5.3 (Adam and the schedule) and 5.4 (label smoothing,
from Szegedy et al. 2016, section 7).

:class:`Adam` is Kingma and Ba's update with the paper's ``beta_2 = 0.98`` and
``epsilon = 1e-9`` (and ``beta_1 = 0.9``): each parameter moves by a running mean of its
gradient divided by the square root of a running mean of its squared gradient, both corrected
for starting at zero. It gives the numbers of ``torch.optim.Adam`` (the tests compare them step
by step), without its seconds of start-up; chapter 9's word-reversal model and the chapters'
small trained models use it. :func:`noam_learning_rate` is the paper's schedule and
:func:`label_smoothed_loss` its loss; the shipped reversal model trains with neither (a cosine
schedule and plain cross-entropy), chapter 9 shows them beside it.
"""

import math
from collections.abc import Iterable

import torch
from torch import nn

from transformer_tutorial.model.checks import check_positive_int

__all__ = [
    "Adam",
    "label_smoothed_loss",
    "noam_learning_rate",
]


class Adam:
    """Adam (Kingma & Ba, 2015, Algorithm 1), written out. For each parameter ``w`` with
    gradient ``g``, at step ``t``::

        m = beta_1 m + (1 - beta_1) g          (running mean of the gradient)
        v = beta_2 v + (1 - beta_2) g^2        (running mean of its square)
        w = w - lr * m_hat / (sqrt(v_hat) + epsilon),
        m_hat = m / (1 - beta_1^t),  v_hat = v / (1 - beta_2^t)   (bias corrections)

    Defaults are PyTorch's (``betas=(0.9, 0.999)``, ``eps=1e-8``); the paper (section 5.3) uses
    ``betas=(0.9, 0.98)``, ``eps=1e-9``, which :func:`train` passes. The arithmetic is
    ``torch.optim.Adam``'s, in the same order, so the two give the same weights bit for bit
    (tested). It is written out because creating the first ``torch.optim`` optimiser in a
    process imports PyTorch's compiler (``torch._dynamo``): 2-5 s of start-up, measured, that a
    chapter's notebook cannot spare. Parameters that don't require a gradient are left alone.
    """

    def __init__(
        self,
        parameters: Iterable[nn.Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
        self.parameters = [parameter for parameter in parameters if parameter.requires_grad]
        if not self.parameters:
            raise ValueError("parameters is empty: Adam needs at least one trainable tensor")
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr}")
        self.lr, self.betas, self.eps = lr, betas, eps
        self.means = [torch.zeros_like(parameter) for parameter in self.parameters]  # m
        self.squares = [torch.zeros_like(parameter) for parameter in self.parameters]  # v
        self.steps = 0

    def zero_grad(self) -> None:
        for parameter in self.parameters:
            parameter.grad = None

    @torch.no_grad()
    def step(self, lr: float | None = None) -> None:
        """One update, with learning rate ``lr`` if given (a schedule), else the one set."""
        rate = self.lr if lr is None else lr
        self.steps += 1
        beta_1, beta_2 = self.betas
        correction_1 = 1 - beta_1**self.steps
        root_correction_2 = math.sqrt(1 - beta_2**self.steps)
        for parameter, mean, square in zip(self.parameters, self.means, self.squares, strict=True):
            if parameter.grad is None:
                continue
            gradient = parameter.grad
            mean.lerp_(gradient, 1 - beta_1)  # m = beta_1 m + (1 - beta_1) g
            square.mul_(beta_2).addcmul_(gradient, gradient, value=1 - beta_2)
            denominator = (square.sqrt() / root_correction_2).add_(self.eps)  # sqrt(v_hat) + eps
            parameter.addcdiv_(mean, denominator, value=-rate / correction_1)  # m_hat / ...


def noam_learning_rate(step: int, d_model: int = 512, warmup_steps: int = 4000) -> float:
    """The paper's schedule (section 5.3, equation 3), for ``step`` = 1, 2, ...::

        lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

    It grows linearly for ``warmup_steps`` steps, peaks at ``(d_model * warmup_steps)^-0.5``
    (7.0e-4 for the base model) and then decays as ``1 / sqrt(step)``."""
    for name, value in (("step", step), ("d_model", d_model), ("warmup_steps", warmup_steps)):
        check_positive_int(name, value)  # steps count from 1
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def label_smoothed_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    epsilon: float = 0.1,
    ignore_index: int | None = None,
) -> torch.Tensor:
    """Cross-entropy against a smoothed target (section 5.4, ``epsilon_ls = 0.1``): the right
    token gets probability ``1 - epsilon + epsilon / |V|`` and every other ``epsilon / |V|``.

    ``logits`` ``(N, |V|)``, ``targets`` ``(N,)``; positions whose target is ``ignore_index``
    count for nothing. The mean over the other positions, as
    ``torch.nn.functional.cross_entropy(..., label_smoothing=epsilon)`` computes it (tested)."""
    if logits.ndim != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(
            f"logits must be (N, |V|) and targets (N,), got {tuple(logits.shape)} and "
            f"{tuple(targets.shape)}"
        )
    if not 0 <= epsilon < 1:
        raise ValueError(f"epsilon must lie in [0, 1), got {epsilon}")
    keep = (
        torch.ones_like(targets, dtype=torch.bool)
        if ignore_index is None
        else targets != ignore_index
    )
    if not keep.any():
        raise ValueError("every target is ignore_index: nothing to average")
    log_p = torch.log_softmax(logits[keep], dim=-1)  # (N', |V|)
    right = -log_p.gather(-1, targets[keep][:, None])[:, 0]  # (N',): -log p(right token)
    spread = -log_p.mean(dim=-1)  # (N',): mean over all V tokens of -log p
    return ((1 - epsilon) * right + epsilon * spread).mean()
