"""Tests for transformer_tutorial.model.norm (paper section 3.1; Ba et al. 2016)."""

import numpy as np
import pytest
import torch
from torch import nn

from transformer_tutorial.model.norm import (
    LayerNorm,
    SublayerConfig,
    SublayerConnection,
    batch_norm,
    layer_norm,
)


def test_layer_norm_of_one_hot_matches_the_published_numbers():
    third = np.sqrt(3.0)  # 0.75 / sqrt(0.1875) = sqrt(3) = 1.732...
    np.testing.assert_allclose(
        layer_norm([1.0, 0.0, 0.0, 0.0], eps=0.0), [third, -1 / third, -1 / third, -1 / third]
    )
    expected = nn.LayerNorm(4)(torch.tensor([1.0, 0.0, 0.0, 0.0])).detach().numpy()
    np.testing.assert_allclose(layer_norm([1.0, 0.0, 0.0, 0.0]), expected, rtol=1e-6)
    np.testing.assert_allclose(expected, [1.732, -0.577, -0.577, -0.577], atol=1e-3)


def test_unbiased_variance_gives_the_tutorials_numbers():
    np.testing.assert_allclose(
        layer_norm([1.0, 0.0, 0.0, 0.0], eps=0.0, unbiased=True), [1.5, -0.5, -0.5, -0.5]
    )


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("shape", [(4,), (3, 8), (2, 5, 16)], ids=str)
def test_layer_norm_numpy_matches_nn_layer_norm_with_gain_and_bias(shape, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, dtype=torch.float64, generator=generator) * 3 + 1
    reference = nn.LayerNorm(shape[-1], dtype=torch.float64)
    with torch.no_grad():
        reference.weight.copy_(torch.randn(shape[-1], generator=generator))
        reference.bias.copy_(torch.randn(shape[-1], generator=generator))
    ours = layer_norm(x.numpy(), reference.weight.detach().numpy(), reference.bias.detach().numpy())
    np.testing.assert_allclose(ours, reference(x).detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("eps", [1e-5, 1e-12])
def test_layer_norm_module_equals_nn_layer_norm_forward_and_backward(eps, seed):
    generator = torch.Generator().manual_seed(seed)
    ours = LayerNorm(16, eps=eps).double()
    reference = nn.LayerNorm(16, eps=eps, dtype=torch.float64)
    with torch.no_grad():
        gain, bias = torch.randn(2, 16, generator=generator, dtype=torch.float64)
        ours.gain.copy_(gain)
        ours.bias.copy_(bias)
        reference.weight.copy_(gain)
        reference.bias.copy_(bias)
    x = torch.randn(3, 7, 16, dtype=torch.float64, generator=generator, requires_grad=True)
    torch.testing.assert_close(ours(x), reference(x))
    (grad_ours,) = torch.autograd.grad(ours(x).pow(3).sum(), x)
    (grad_reference,) = torch.autograd.grad(reference(x).pow(3).sum(), x)
    torch.testing.assert_close(grad_ours, grad_reference)


def test_layer_norm_output_has_zero_mean_and_unit_variance_per_token():
    x = torch.randn(4, 9, 32, generator=torch.Generator().manual_seed(0)) * 10 + 5
    y = LayerNorm(32, eps=1e-12)(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(4, 9), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(4, 9), atol=1e-4, rtol=0)


def test_layer_norm_ignores_the_rest_of_the_batch_but_batch_norm_does_not():
    rng = np.random.default_rng(0)
    batch = rng.normal(size=(3, 5, 8))
    changed = batch.copy()
    changed[1:] = rng.normal(size=(2, 5, 8)) * 4 + 2  # other sequences change, sequence 0 not
    np.testing.assert_allclose(layer_norm(batch)[0], layer_norm(changed)[0])
    assert np.abs(batch_norm(batch)[0] - batch_norm(changed)[0]).max() > 0.1


def test_batch_norm_normalises_each_feature_over_batch_and_positions():
    x = np.random.default_rng(1).normal(size=(4, 6, 3)) * 2 + 7
    y = batch_norm(x, eps=0.0)
    np.testing.assert_allclose(y.mean(axis=(0, 1)), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=(0, 1)), 1.0)


def _sublayer(seed):
    layer = nn.Linear(8, 8, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(8, 8, generator=torch.Generator().manual_seed(seed)))
    return layer


@pytest.mark.parametrize("norm_first", [False, True])
def test_sublayer_connection_computes_post_ln_and_pre_ln(norm_first):
    block = SublayerConnection(SublayerConfig(d_model=8, norm_first=norm_first)).double()
    sublayer = _sublayer(0)
    x = torch.randn(2, 3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    norm = nn.LayerNorm(8, dtype=torch.float64)
    expected = x + sublayer(norm(x)) if norm_first else norm(x + sublayer(x))
    torch.testing.assert_close(block(x, sublayer), expected)


@pytest.mark.parametrize("norm_first", [False, True])
def test_sublayer_connection_without_residual_drops_the_skip_path(norm_first):
    config = SublayerConfig(d_model=8, norm_first=norm_first)
    block = SublayerConnection(config, residual=False).double()
    sublayer = _sublayer(2)
    x = torch.randn(2, 3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    norm = nn.LayerNorm(8, dtype=torch.float64)
    expected = sublayer(norm(x)) if norm_first else norm(sublayer(x))
    torch.testing.assert_close(block(x, sublayer), expected)


def test_residual_path_passes_the_gradient_of_a_dead_sublayer():
    block = SublayerConnection(SublayerConfig(d_model=4, norm_first=True))
    x = torch.randn(1, 2, 4, requires_grad=True)
    block(x, lambda h: 0.0 * h).sum().backward()  # the sub-layer passes no gradient at all
    torch.testing.assert_close(x.grad, torch.ones_like(x))


def test_dropout_applies_in_training_only():
    block = SublayerConnection(SublayerConfig(d_model=4, norm_first=True, dropout=0.5))
    x = torch.ones(1, 64, 4)
    block.eval()
    torch.testing.assert_close(block(x, lambda h: x), 2 * x)
    block.train()
    torch.manual_seed(0)
    assert not torch.equal(block(x, lambda h: x), 2 * x)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: layer_norm(np.ones((2, 0))), "D >= 1"),
        (lambda: layer_norm(np.float64(1.0)), "D >= 1"),
        (lambda: layer_norm(np.ones(3), gain=np.ones(4)), "gain must have shape"),
        (lambda: layer_norm(np.ones(3), bias=np.ones((1, 3))), "bias must have shape"),
        (lambda: layer_norm(np.ones(1), unbiased=True), "D >= 2"),
        (lambda: batch_norm(np.ones((2, 3))), r"\(B, T, D\)"),
        (lambda: LayerNorm(0), "d_model"),
        (lambda: LayerNorm(4, eps=0.0), "eps"),
        (lambda: LayerNorm(4)(torch.ones(2, 5)), r"D = 4"),
        (lambda: SublayerConfig(d_model=4, dropout=1.0), "dropout"),
        (lambda: SublayerConfig(d_model=-1), "d_model"),
    ],
)
def test_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
