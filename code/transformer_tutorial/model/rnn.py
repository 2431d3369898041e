"""Recurrent networks, and the three problems that made the Transformer replace them.

Sources:

- The recurrence is the one ``torch.nn.RNN`` documents (Elman's network):
  ``h_t = tanh(x_t W_ih^T + b_ih + h_(t-1) W_hh^T + b_hh)``.
- Vanishing and exploding gradients: Bengio, Simard & Frasconi (1994); Pascanu, Mikolov &
  Bengio (2013), section 2. Backpropagation through time multiplies one Jacobian per step,
  ``dh_t / dh_(t-1) = diag(f'(a_t)) W_hh``, so ``dh_T / dh_t`` is a product of ``T - t`` of them.
- Vaswani et al. (2017), section 1 (recurrence "precludes parallelization within training
  examples") and section 4, Table 1 (per-layer complexity, sequential operations and maximum
  path length of self-attention, recurrent and convolutional layers).

Here the shape letters of the package docstring are used with two additions: ``E`` is the width
of an RNN's inputs and ``D`` the width of its hidden state (the RNN's ``d_model``); ``C`` is a
number of classes. Everything that draws random numbers takes a ``torch.Generator``.
"""

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from transformer_tutorial.model.checks import check_positive_int

__all__ = [
    "Nonlinearity",
    "RNNConfig",
    "TanhRNN",
    "orthogonal_recurrent_weight",
    "rnn_step",
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
    """One step: ``h_t = f(x_t W_ih^T + b_ih + h_(t-1) W_hh^T + b_hh)``.

    ``x_t`` ``(B, E)``, ``h_prev`` ``(B, D)``, ``weight_ih`` ``(D, E)``, ``weight_hh`` ``(D, D)``,
    biases ``(D,)``; returns ``h_t`` ``(B, D)``. The new state needs the old one: this line is
    why an RNN cannot process the positions of a sentence at the same time.
    """
    pre_activation = x_t @ weight_ih.T + bias_ih + h_prev @ weight_hh.T + bias_hh  # (B, D)
    return torch.tanh(pre_activation) if nonlinearity == "tanh" else torch.relu(pre_activation)


class TanhRNN(nn.Module):
    """A single-layer Elman RNN written as a Python loop over time steps.

    Its parameters have ``nn.RNN``'s names and shapes (``weight_ih_l0`` ``(D, E)``,
    ``weight_hh_l0`` ``(D, D)``, ``bias_ih_l0``, ``bias_hh_l0`` ``(D,)``), so
    ``TanhRNN(config).load_state_dict(nn_rnn.state_dict())`` copies a library RNN exactly.
    Initialisation matches ``nn.RNN`` too: every weight from ``U(-1/sqrt(D), 1/sqrt(D))``.
    """

    def __init__(self, config: RNNConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        hidden, width = config.hidden_size, config.input_size
        self.weight_ih_l0 = nn.Parameter(torch.empty(hidden, width))  # (D, E)
        self.weight_hh_l0 = nn.Parameter(torch.empty(hidden, hidden))  # (D, D)
        self.bias_ih_l0 = nn.Parameter(torch.empty(hidden))  # (D,)
        self.bias_hh_l0 = nn.Parameter(torch.empty(hidden))  # (D,)
        bound = 1.0 / math.sqrt(hidden)
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.uniform_(-bound, bound, generator=generator)

    def _check(self, inputs: torch.Tensor, h0: torch.Tensor | None) -> None:
        width, hidden = self.config.input_size, self.config.hidden_size
        if inputs.dim() != 3 or inputs.shape[-1] != width:
            raise ValueError(f"inputs must have shape (B, T, {width}), got {tuple(inputs.shape)}")
        if inputs.shape[1] == 0:
            raise ValueError("inputs hold an empty sequence (T = 0): there is no step to take")
        if h0 is not None and tuple(h0.shape) != (inputs.shape[0], hidden):
            raise ValueError(
                f"h0 must have shape (B, D) = ({inputs.shape[0]}, {hidden}), got {tuple(h0.shape)}"
            )

    def hidden_states(
        self, inputs: torch.Tensor, h0: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """Every state ``[h_0, h_1, ..., h_T]``, each ``(B, D)``; ``h_0`` is zeros unless given."""
        self._check(inputs, h0)
        if h0 is None:
            h0 = inputs.new_zeros(inputs.shape[0], self.config.hidden_size)  # (B, D)
        states = [h0]
        for t in range(inputs.shape[1]):  # strictly one step after another
            states.append(
                rnn_step(
                    inputs[:, t],  # (B, T, E) -> (B, E)
                    states[-1],
                    self.weight_ih_l0,
                    self.weight_hh_l0,
                    self.bias_ih_l0,
                    self.bias_hh_l0,
                    self.config.nonlinearity,
                )
            )
        return states

    def forward(
        self, inputs: torch.Tensor, h0: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``inputs`` ``(B, T, E)`` -> ``(outputs (B, T, D), h_T (B, D))``, like ``nn.RNN``
        with ``batch_first=True`` (which returns ``h_T`` as ``(1, B, D)``)."""
        states = self.hidden_states(inputs, h0)
        return torch.stack(states[1:], dim=1), states[-1]  # T x (B, D) -> (B, T, D)


def torch_rnn(config: RNNConfig) -> nn.RNN:
    """PyTorch's own RNN with the same sizes (``batch_first=True``), for comparison."""
    return nn.RNN(
        config.input_size, config.hidden_size, nonlinearity=config.nonlinearity, batch_first=True
    )


def torch_lstm(config: RNNConfig) -> nn.LSTM:
    """PyTorch's LSTM (Hochreiter & Schmidhuber, 1997) with the same sizes (``batch_first``)."""
    return nn.LSTM(config.input_size, config.hidden_size, batch_first=True)


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
