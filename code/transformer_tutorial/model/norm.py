"""Add & Norm: the residual connection around every sub-layer, and layer normalisation.

Sources:

- Vaswani et al. (2017), section 3.1: "the output of each sub-layer is
  ``LayerNorm(x + Sublayer(x))``" (post-LN), with dropout applied to the sub-layer's output
  before it is added (section 5.4).
- He et al. (2016) for the residual connection ``x + F(x)``; Ba et al. (2016) for layer
  normalisation: for each token vector ``x`` of width ``D``,

      LayerNorm(x) = gain * (x - mean(x)) / sqrt(var(x) + eps) + bias

  with the mean and the *biased* variance (divide by ``D``) taken over the ``D`` features of
  that one token, so the result depends neither on the batch nor on the other positions.
- Pre-LN, ``x + Sublayer(LayerNorm(x))``: in the tensor2tensor code (Vaswani et al. 2018),
  Baevski and Auli (2019) and Child et al. (2019), made common by GPT-2 (Radford et al. 2019),
  analysed by Xiong et al. (2020). It leaves the residual path free of normalisation.

:func:`layer_norm` is the formula in NumPy; :class:`LayerNorm` is the same as a module (equal to
``nn.LayerNorm``); :class:`SublayerConnection` wraps any sub-layer in either arrangement.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from transformer_tutorial.model.checks import check_positive_int

__all__ = [
    "LayerNorm",
    "SublayerConfig",
    "SublayerConnection",
    "batch_norm",
    "layer_norm",
]


def layer_norm(
    x: np.ndarray,
    gain: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    eps: float = 1e-5,
    unbiased: bool = False,
) -> np.ndarray:
    """Normalise each vector along the last axis ``(..., D)`` to mean 0 and variance 1, then
    scale by ``gain`` ``(D,)`` and shift by ``bias`` ``(D,)`` (defaults: ones and zeros).

    ``unbiased=False`` divides the squared deviations by ``D``, as the paper's LayerNorm and
    ``nn.LayerNorm`` do: ``[1, 0, 0, 0]`` becomes about ``[1.732, -0.577, -0.577, -0.577]``.
    ``unbiased=True`` divides by ``D - 1`` (``torch.std``'s default), which some tutorials use
    by mistake and which gives ``[1.5, -0.5, -0.5, -0.5]`` instead.
    """
    x = np.asarray(x, dtype=float)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must have shape (..., D) with D >= 1, got {x.shape}")
    width = x.shape[-1]
    if unbiased and width < 2:
        raise ValueError("the unbiased variance needs D >= 2 features")
    for name, value in (("gain", gain), ("bias", bias)):
        if value is not None and np.shape(value) != (width,):
            raise ValueError(f"{name} must have shape (D,) = ({width},), got {np.shape(value)}")
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    variance = x.var(axis=-1, ddof=1 if unbiased else 0, keepdims=True)  # (..., 1)
    normalised = (x - mean) / np.sqrt(variance + eps)  # (..., D)
    if gain is not None:
        normalised = normalised * gain  # (..., D) * (D,)
    if bias is not None:
        normalised = normalised + bias  # (..., D) + (D,)
    return normalised


def batch_norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Batch normalisation of a batch of sequences ``(B, T, D)``, for contrast with LayerNorm:
    each *feature* is normalised with the mean and variance over all ``B x T`` token vectors,
    so one token's output depends on every other token in the batch (no gain or bias)."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 3 or 0 in x.shape:
        raise ValueError(f"x must have shape (B, T, D) with no empty axis, got {x.shape}")
    mean = x.mean(axis=(0, 1), keepdims=True)  # (1, 1, D): one mean per feature
    variance = x.var(axis=(0, 1), keepdims=True)  # (1, 1, D)
    return (x - mean) / np.sqrt(variance + eps)  # (B, T, D)


class LayerNorm(nn.Module):
    """Layer normalisation written out: equal to ``nn.LayerNorm(d_model, eps)``.

    ``gain`` (``nn.LayerNorm.weight``) starts at ones and ``bias`` at zeros, so a fresh layer
    only standardises; training then learns how much scale and offset each feature gets back.
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        check_positive_int("d_model", d_model)
        if not eps > 0:
            raise ValueError(f"eps must be positive, got {eps}")
        self.d_model, self.eps = d_model, eps
        self.gain = nn.Parameter(torch.ones(d_model))  # (D,)
        self.bias = nn.Parameter(torch.zeros(d_model))  # (D,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(..., D)`` -> ``(..., D)``, each vector normalised on its own."""
        if x.dim() == 0 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape (..., D) with D = {self.d_model}, got {tuple(x.shape)}"
            )
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        centered = x - mean  # (..., D)
        # the mean of the squares divides by D (biased); written out, it is also ~5x faster on
        # CPU than x.var(unbiased=False), which would make LayerNorm a real model's slowest step
        variance = (centered * centered).mean(dim=-1, keepdim=True)  # (..., 1)
        return self.gain * centered / torch.sqrt(variance + self.eps) + self.bias  # (..., D)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


@dataclass
class SublayerConfig:
    """How a sub-layer is wrapped."""

    d_model: int = 512  # width of the vectors on the residual path (paper: 512)
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN (tensor2tensor, GPT-2)
    dropout: float = 0.0  # on the sub-layer's output before the addition (paper: 0.1)
    eps: float = 1e-5  # LayerNorm's epsilon (BERT: 1e-12)

    def __post_init__(self) -> None:
        check_positive_int("d_model", self.d_model)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


class SublayerConnection(nn.Module):
    """Residual connection and LayerNorm around one sub-layer, in either arrangement:

    - post-LN (paper): ``LayerNorm(x + Dropout(Sublayer(x)))``
    - pre-LN (tensor2tensor, GPT-2):  ``x + Dropout(Sublayer(LayerNorm(x)))``

    With ``residual=False`` the ``x +`` is dropped, which no real model does: it exists so the
    chapter "Add & Norm" can measure what the residual path is for.
    """

    def __init__(self, config: SublayerConfig, residual: bool = True):
        super().__init__()
        self.config = config
        self.residual = residual
        self.norm = LayerNorm(config.d_model, config.eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """``x`` ``(B, T, D)``; ``sublayer`` maps ``(B, T, D)`` to ``(B, T, D)``."""
        skip = x if self.residual else torch.zeros_like(x)
        if self.config.norm_first:
            return skip + self.dropout(sublayer(self.norm(x)))  # (B, T, D)
        return self.norm(skip + self.dropout(sublayer(x)))  # (B, T, D)
