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
