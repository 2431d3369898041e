"""Adam, written out: the optimiser the paper trains with (Vaswani et al. 2017, section 5.3).

Kingma and Ba's update with the paper's ``beta_2 = 0.98`` and ``epsilon = 1e-9`` (and
``beta_1 = 0.9``): each parameter moves by a running mean of its gradient divided by the square
root of a running mean of its squared gradient, both corrected for starting at zero. It gives
the numbers of ``torch.optim.Adam`` (the tests compare them step by step), without its seconds
of start-up; chapter 9's word-reversal model and the chapters' small trained models use it.
"""

import math
from collections.abc import Iterable

import torch
from torch import nn

__all__ = [
    "Adam",
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
