"""The position-wise feed-forward network: the same two-layer MLP applied to every token.

Source: Vaswani et al. (2017), section 3.3, equation (2):

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

with ``W_1`` of shape ``(D, F)``, ``W_2`` of shape ``(F, D)`` and ``F = d_ff = 2048`` for
``D = 512``: the layer widens each vector four times, applies the nonlinearity, and narrows it
back. BERT and GPT-2 replace ReLU with GELU (Hendrycks and Gimpel, 2016),
``GELU(z) = z Phi(z)`` with ``Phi`` the standard normal CDF; GPT-2 uses its tanh approximation.

``F`` below is ``d_ff``. :func:`feed_forward` is the formula in NumPy; :class:`FeedForward` is
the module, which acts on each of the ``B x T`` positions independently.
"""

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from transformer_tutorial.model.attention import linear
from transformer_tutorial.model.checks import check_positive_int

__all__ = ["ACTIVATIONS", "FeedForward", "FeedForwardConfig", "feed_forward", "gelu", "relu"]

Activation = Literal["relu", "gelu", "gelu_tanh"]
ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "gelu_tanh")


def relu(z: np.ndarray) -> np.ndarray:
    """``max(0, z)``, elementwise."""
    return np.maximum(0.0, z)


def gelu(z: np.ndarray, approximate: bool = False) -> np.ndarray:
    """``z Phi(z)``, elementwise; ``approximate=True`` is GPT-2's tanh formula."""
    z = np.asarray(z, dtype=float)
    if approximate:
        return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))
    erf = np.vectorize(math.erf, otypes=[float])
    return 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))


def _check_activation(activation: str) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def feed_forward(
    x: np.ndarray,
    w1: np.ndarray,
    b1: np.ndarray,
    w2: np.ndarray,
    b2: np.ndarray,
    activation: str = "relu",
) -> np.ndarray:
    """Equation (2) for a sequence ``x`` ``(T, D)`` (or any ``(..., D)``): ``w1`` ``(D, F)``,
    ``b1`` ``(F,)``, ``w2`` ``(F, D)``, ``b2`` ``(D,)``. Returns ``(..., D)``."""
    _check_activation(activation)
    x = np.asarray(x, dtype=float)
    if np.ndim(w1) != 2:
        raise ValueError(f"w1 must have shape (D, F), got {np.shape(w1)}")
    d_model, d_ff = np.shape(w1)
    expected = {"b1": (d_ff,), "w2": (d_ff, d_model), "b2": (d_model,)}
    for name, value in (("b1", b1), ("w2", w2), ("b2", b2)):
        if np.shape(value) != expected[name]:
            raise ValueError(
                f"{name} must have shape {expected[name]} to match w1 (D, F) = {(d_model, d_ff)}, "
                f"got {np.shape(value)}"
            )
    if x.ndim == 0 or x.shape[-1] != d_model:
        raise ValueError(f"x must have shape (..., D) with D = {d_model}, got {x.shape}")
    hidden = x @ w1 + b1  # (..., D) @ (D, F) -> (..., F)
    hidden = relu(hidden) if activation == "relu" else gelu(hidden, activation == "gelu_tanh")
    return hidden @ w2 + b2  # (..., F) @ (F, D) -> (..., D)


@dataclass
class FeedForwardConfig:
    """Sizes of the position-wise feed-forward network."""

    d_model: int = 512  # width in and out (paper: 512)
    d_ff: int | None = None  # hidden width F; None means 4 x d_model (paper: 2048)
    activation: Activation = "relu"  # "relu" (paper), "gelu" (BERT), "gelu_tanh" (GPT-2)
    dropout: float = 0.0  # on the hidden activations, as nn.TransformerEncoderLayer (paper: 0)
    bias: bool = True  # b_1 and b_2

    def __post_init__(self) -> None:
        check_positive_int("d_model", self.d_model)
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        check_positive_int("d_ff", self.d_ff)
        _check_activation(self.activation)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


class FeedForward(nn.Module):
    """``W_2(activation(W_1 x))`` at every position: ``(B, T, D)`` -> ``(B, T, D)``.

    ``nn.Linear`` acts on the last axis only, so position ``t``'s output depends on position
    ``t``'s input alone; the tests check that running the tokens one by one gives the same.
    """

    def __init__(self, config: FeedForwardConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        self.W_1 = linear(config.d_model, config.d_ff, bias=config.bias, generator=generator)
        self.W_2 = linear(config.d_ff, config.d_model, bias=config.bias, generator=generator)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(..., D)`` -> ``(..., D)``."""
        if x.dim() == 0 or x.shape[-1] != self.config.d_model:
            raise ValueError(
                f"x must have shape (..., D) with D = {self.config.d_model}, got {tuple(x.shape)}"
            )
        hidden = self.W_1(x)  # (..., D) -> (..., F)
        activation = self.config.activation
        if activation == "relu":
            hidden = torch.relu(hidden)
        else:
            hidden = F.gelu(hidden, approximate="tanh" if activation == "gelu_tanh" else "none")
        return self.W_2(self.dropout(hidden))  # (..., F) -> (..., D)
