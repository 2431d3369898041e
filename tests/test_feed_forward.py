"""Tests for transformer_tutorial.model.feed_forward (paper section 3.3, equation 2)."""

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from transformer_tutorial.model.feed_forward import (
    FeedForward,
    FeedForwardConfig,
    feed_forward,
    gelu,
    relu,
)


def _weights(module: FeedForward):
    return (
        module.W_1.weight.detach().double().numpy().T,  # (D, F)
        module.W_1.bias.detach().double().numpy(),  # (F,)
        module.W_2.weight.detach().double().numpy().T,  # (F, D)
        module.W_2.bias.detach().double().numpy(),  # (D,)
    )


def test_default_hidden_width_is_four_times_d_model():
    assert FeedForwardConfig().d_ff == 2048
    assert FeedForwardConfig(d_model=768).d_ff == 3072
    assert FeedForwardConfig(d_model=8, d_ff=5).d_ff == 5


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("seed", range(3))
def test_module_equals_the_numpy_formula(activation, seed):
    generator = torch.Generator().manual_seed(seed)
    module = FeedForward(FeedForwardConfig(8, 24, activation), generator=generator).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=generator)
    expected = feed_forward(x.numpy(), *_weights(module), activation=activation)
    np.testing.assert_allclose(module(x).detach().numpy(), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
def test_token_by_token_equals_the_whole_sequence(activation):
    generator = torch.Generator().manual_seed(0)
    module = FeedForward(FeedForwardConfig(16, activation=activation), generator=generator)
    x = torch.randn(3, 7, 16, generator=generator)
    whole = module(x)
    one_by_one = torch.stack([module(x[:, t]) for t in range(7)], dim=1)  # 7 x (B, D) -> (B, T, D)
    torch.testing.assert_close(whole, one_by_one)


def test_permuting_positions_permutes_outputs():
    generator = torch.Generator().manual_seed(1)
    module = FeedForward(FeedForwardConfig(8), generator=generator)
    x = torch.randn(2, 6, 8, generator=generator)
    order = torch.randperm(6, generator=generator)
    torch.testing.assert_close(module(x[:, order]), module(x)[:, order])


def test_matches_the_ffn_inside_nn_transformer_encoder_layer():
    reference = nn.TransformerEncoderLayer(8, 2, 20, dropout=0.0, batch_first=True)
    module = FeedForward(FeedForwardConfig(8, 20))
    module.W_1.load_state_dict(reference.linear1.state_dict())
    module.W_2.load_state_dict(reference.linear2.state_dict())
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(module(x), reference.linear2(torch.relu(reference.linear1(x))))


def test_activations_at_known_points():
    z = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(relu(z), [0.0, 0.0, 0.0, 1.0, 2.0])
    phi = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in z])
    np.testing.assert_allclose(gelu(z), z * phi)
    np.testing.assert_allclose(gelu(1.0), 0.8413447460685429)
    torch_tanh = F.gelu(torch.tensor(z), approximate="tanh").numpy()
    np.testing.assert_allclose(gelu(z, approximate=True), torch_tanh)
    assert 0 < np.abs(gelu(z) - gelu(z, approximate=True)).max() < 1e-3


def test_gelu_module_uses_exact_and_tanh_forms():
    x = torch.linspace(-3, 3, 13, dtype=torch.float64)[None, :, None]
    for activation, approximate in (("gelu", False), ("gelu_tanh", True)):
        module = FeedForward(FeedForwardConfig(1, 1, activation, bias=False)).double()
        with torch.no_grad():
            module.W_1.weight.fill_(1.0)
            module.W_2.weight.fill_(1.0)
        expected = gelu(x.numpy(), approximate=approximate)
        np.testing.assert_allclose(module(x).detach().numpy(), expected, rtol=1e-12)


def test_parameter_count_is_two_matrices_and_two_biases():
    module = FeedForward(FeedForwardConfig(512))
    assert sum(p.numel() for p in module.parameters()) == 2 * 512 * 2048 + 2048 + 512


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: FeedForwardConfig(activation="tanh"), "activation must be one of"),
        (lambda: FeedForwardConfig(d_model=0), "d_model"),
        (lambda: FeedForwardConfig(d_model=4, d_ff=0), "d_ff"),
        (lambda: FeedForwardConfig(dropout=-0.1), "dropout"),
        (lambda: FeedForward(FeedForwardConfig(4))(torch.ones(2, 3, 5)), "D = 4"),
        (lambda: feed_forward(np.ones((2, 3)), np.ones(3), 0, 0, 0), r"w1 must have shape"),
        (
            lambda: feed_forward(np.ones((2, 3)), np.ones((3, 5)), np.ones(4), np.ones((5, 3)), 0),
            "b1 must have shape",
        ),
        (
            lambda: feed_forward(
                np.ones((2, 4)), np.ones((3, 5)), np.ones(5), np.ones((5, 3)), np.ones(3)
            ),
            "x must have shape",
        ),
        (lambda: feed_forward(np.ones(3), *[np.ones(1)] * 4, activation="swish"), "activation"),
    ],
)
def test_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
