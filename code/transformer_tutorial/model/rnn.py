"""A recurrent network: the way to read a sentence that the Transformer replaced.

Sources:

- The recurrence is Elman's network, the one ``torch.nn.RNN`` documents:
  ``h_t = tanh(x_t W_ih^T + b_ih + h_(t-1) W_hh^T + b_hh)``.
- Vaswani et al. (2017), section 1: recurrence "precludes parallelization within training
  examples", since ``h_t`` needs ``h_(t-1)``.
- Pascanu, Mikolov & Bengio (2013), section 2, for the recurrent weight built to a given
  spectral radius (:func:`orthogonal_recurrent_weight`); the measurements of chapter 1 live in
  :mod:`transformer_tutorial.studies.recurrence`.

Shapes use the package letters with one addition: ``E`` is the width of an RNN's inputs and
``D`` the width of its hidden state (the RNN's ``d_model``). Everything that draws random
numbers takes a ``torch.Generator``.
"""

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from transformer_tutorial.model.checks import check_positive_int
from transformer_tutorial.model.draws import uniform

__all__ = [
    "Nonlinearity",
    "RNNConfig",
    "TanhRNN",
    "orthogonal_recurrent_weight",
    "rnn_step",
    "torch_gru",
    "torch_lstm",
    "torch_rnn",
]


Nonlinearity = Literal["tanh", "relu"]


@dataclass
class RNNConfig:
    """Sizes of a single-layer recurrent network."""

    input_size: int = 8  # E: width of each input vector x_t
    hidden_size: int = 16  # D: width of the hidden state h_t
    nonlinearity: Nonlinearity = "tanh"  # f in h_t = f(...); nn.RNN offers tanh and relu

    def __post_init__(self) -> None:
        check_positive_int("input_size", self.input_size)
        check_positive_int("hidden_size", self.hidden_size)
        if self.nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {self.nonlinearity!r}")


def rnn_step(
    x_t: torch.Tensor,
    h_prev: torch.Tensor,
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor,
    bias_hh: torch.Tensor,
    nonlinearity: Nonlinearity = "tanh",
) -> torch.Tensor:
    """One step: ``h_t = tanh(x_t W_ih^T + b_ih + h_(t-1) W_hh^T + b_hh)`` (Elman's RNN).

    It needs ``h_(t-1)``: no step can start before the one before it (Vaswani et al., sec. 1).
    """
    # (B, E) @ (E, D) + (D,) + (B, D) @ (D, D) + (D,) -> (B, D)
    pre_activation = x_t @ weight_ih.T + bias_ih + h_prev @ weight_hh.T + bias_hh
    if nonlinearity == "tanh":
        return torch.tanh(pre_activation)
    return torch.relu(pre_activation)


class TanhRNN(nn.Module):
    """A single-layer Elman RNN written as a Python loop over time steps.

    Its parameters have ``nn.RNN``'s names, shapes and initialisation, ``U(-1/sqrt(D), 1/sqrt(D))``,
    so ``TanhRNN(config).load_state_dict(nn_rnn.state_dict())`` copies a library RNN exactly.
    """

    def __init__(self, config: RNNConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        hidden, width = config.hidden_size, config.input_size
        self.weight_ih_l0 = nn.Parameter(torch.empty(hidden, width))  # W_ih (D, E)
        self.weight_hh_l0 = nn.Parameter(torch.empty(hidden, hidden))  # W_hh (D, D)
        self.bias_ih_l0 = nn.Parameter(torch.empty(hidden))  # b_ih (D,)
        self.bias_hh_l0 = nn.Parameter(torch.empty(hidden))  # b_hh (D,)
        bound = 1.0 / math.sqrt(hidden)
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.copy_(uniform(parameter.shape, bound, generator))

    def step(self, x_t: torch.Tensor, h_prev: torch.Tensor) -> torch.Tensor:
        """:func:`rnn_step` with this layer's weights: ``x_t`` ``(B, E)``, ``h_prev`` ``(B, D)``."""
        return rnn_step(
            x_t,
            h_prev,
            self.weight_ih_l0,
            self.weight_hh_l0,
            self.bias_ih_l0,
            self.bias_hh_l0,
            self.config.nonlinearity,
        )  # (B, D)

    def hidden_states(
        self, inputs: torch.Tensor, h0: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """Every state ``[h_0, h_1, ..., h_T]``, each ``(B, D)``; ``h_0`` is zeros unless given."""
        _check_inputs(self.config, inputs, h0)
        if h0 is None:
            h0 = inputs.new_zeros(inputs.shape[0], self.config.hidden_size)  # (B, D)
        states = [h0]
        for t in range(inputs.shape[1]):  # strictly one step after another
            x_t = inputs[:, t]  # (B, T, E) -> (B, E)
            states.append(self.step(x_t, states[-1]))  # h_t, from x_t and h_(t-1)
        return states

    def forward(
        self, inputs: torch.Tensor, h0: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``inputs`` ``(B, T, E)`` -> ``(outputs (B, T, D), h_T (B, D))``, like ``nn.RNN``
        with ``batch_first=True`` (which returns ``h_T`` as ``(1, B, D)``)."""
        states = self.hidden_states(inputs, h0)
        return torch.stack(states[1:], dim=1), states[-1]  # T x (B, D) -> (B, T, D)


def _check_inputs(config: RNNConfig, inputs: torch.Tensor, h0: torch.Tensor | None) -> None:
    width, hidden = config.input_size, config.hidden_size
    if inputs.dim() != 3 or inputs.shape[-1] != width:
        raise ValueError(f"inputs must have shape (B, T, {width}), got {tuple(inputs.shape)}")
    if inputs.shape[1] == 0:
        raise ValueError("inputs hold an empty sequence (T = 0): there is no step to take")
    if h0 is not None and tuple(h0.shape) != (inputs.shape[0], hidden):
        raise ValueError(
            f"h0 must have shape (B, D) = ({inputs.shape[0]}, {hidden}), got {tuple(h0.shape)}"
        )


def torch_rnn(config: RNNConfig) -> nn.RNN:
    """PyTorch's own RNN with the same sizes (``batch_first=True``), for comparison."""
    return nn.RNN(
        config.input_size, config.hidden_size, nonlinearity=config.nonlinearity, batch_first=True
    )


def torch_lstm(config: RNNConfig) -> nn.LSTM:
    """PyTorch's LSTM (Hochreiter & Schmidhuber, 1997) with the same sizes (``batch_first``)."""
    return nn.LSTM(config.input_size, config.hidden_size, batch_first=True)


def torch_gru(config: RNNConfig) -> nn.GRU:
    """PyTorch's GRU (Cho et al., 2014) with the same sizes (``batch_first=True``)."""
    return nn.GRU(config.input_size, config.hidden_size, batch_first=True)


def orthogonal_recurrent_weight(
    hidden_size: int, spectral_radius: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``W_hh = r Q`` with ``Q`` a random orthogonal matrix: every eigenvalue has modulus ``r``.

    Every singular value of ``W_hh`` is ``r`` as well, so ``W_hh^k`` scales *every* vector by
    exactly ``r^k``: the cleanest setting in which to watch gradients vanish or explode.
    Shape ``(D, D)``, float64.
    """
    check_positive_int("hidden_size", hidden_size)
    if not spectral_radius > 0 or not math.isfinite(spectral_radius):
        raise ValueError(f"spectral_radius must be a positive number, got {spectral_radius!r}")
    gaussian = torch.randn(hidden_size, hidden_size, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)  # (D, D) each
    q = q * torch.sign(torch.diagonal(r))  # fix the signs: Q is then uniformly distributed
    return spectral_radius * q
