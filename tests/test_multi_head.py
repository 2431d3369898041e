"""Tests for transformer_tutorial.model.multi_head (paper section 3.2.2)."""

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from transformer_tutorial.model.attention import scaled_dot_product_attention
from transformer_tutorial.model.multi_head import (
    MultiHeadAttention,
    MultiHeadConfig,
    SeparateHeadsAttention,
    copy_from_torch,
    multi_head_cost,
    separate_heads_from,
)

SIZES = [  # (d_model, num_heads, B, T, S)
    (4, 1, 1, 1, 1),
    (8, 2, 2, 5, 5),
    (12, 3, 3, 4, 7),
    (32, 8, 2, 6, 3),
    (64, 4, 1, 9, 9),
]


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _pair(d_model, num_heads, seed, bias=True):
    """Our layer and PyTorch's, in float64, with the same weights."""
    reference = nn.MultiheadAttention(
        d_model, num_heads, bias=bias, batch_first=True, dtype=torch.float64
    )
    with torch.no_grad():  # PyTorch starts biases at 0: make them matter
        for parameter in reference.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=_generator(seed)) * 0.5)
    ours = MultiHeadAttention(MultiHeadConfig(d_model, num_heads, bias=bias)).double()
    return copy_from_torch(ours, reference), reference


def _sequences(batch, length, key_length, d_model, seed):
    generator = _generator(seed + 1000)
    query = torch.randn(batch, length, d_model, dtype=torch.float64, generator=generator)
    key = torch.randn(batch, key_length, d_model, dtype=torch.float64, generator=generator)
    value = torch.randn(batch, key_length, d_model, dtype=torch.float64, generator=generator)
    return query, key, value


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("sizes", SIZES, ids=str)
def test_matches_torch_multihead_attention(sizes, bias, seed):
    d_model, num_heads, batch, length, key_length = sizes
    ours, reference = _pair(d_model, num_heads, seed, bias)
    query, key, value = _sequences(batch, length, key_length, d_model, seed)
    output, weights = ours(query, key, value)
    expected, expected_weights = reference(query, key, value, average_attn_weights=True)
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-12)
    assert weights.shape == (batch, num_heads, length, key_length)
    torch.testing.assert_close(weights.mean(dim=1), expected_weights, rtol=1e-10, atol=1e-12)
    _, per_head = reference(query, key, value, average_attn_weights=False)
    torch.testing.assert_close(weights, per_head, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("sizes", SIZES[1:], ids=str)
def test_self_attention_with_mask_matches_torch(sizes, seed):
    d_model, num_heads, batch, length, _ = sizes
    ours, reference = _pair(d_model, num_heads, seed)
    x, _, _ = _sequences(batch, length, length, d_model, seed)
    causal = torch.ones(length, length, dtype=torch.bool).tril()  # (T, T): True = may attend
    output, weights = ours(x, mask=causal)
    # PyTorch's nn.MultiheadAttention uses the opposite convention: True = must NOT attend
    expected, expected_weights = reference(x, x, x, attn_mask=~causal)
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(weights.mean(dim=1), expected_weights, rtol=1e-10, atol=1e-12)
    assert (weights[..., ~causal] == 0).all()


@pytest.mark.parametrize("seed", range(3))
def test_padding_mask_per_sequence_matches_torch_key_padding_mask(seed):
    ours, reference = _pair(16, 4, seed)
    x, _, _ = _sequences(3, 6, 6, 16, seed)
    real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True] * 2 + [False] * 4])  # (B, S)
    output, weights = ours(x, mask=real[:, None, None, :])  # (B, S) -> (B, 1, 1, S)
    expected, _ = reference(x, x, x, key_padding_mask=~real)
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-12)
    assert (weights[1, ..., 4:] == 0).all() and (weights[2, ..., 2:] == 0).all()


def test_per_head_mask_reaches_only_its_head():
    ours, _ = _pair(8, 2, 0)
    x, _, _ = _sequences(1, 4, 4, 8, 0)
    mask = torch.ones(2, 4, 4, dtype=torch.bool)  # (H, T, S)
    mask[1] = torch.eye(4, dtype=torch.bool)  # head 1 may only look at itself
    _, weights = ours(x, mask=mask)
    torch.testing.assert_close(weights[0, 1], torch.eye(4, dtype=torch.float64))
    _, unmasked = ours(x)
    torch.testing.assert_close(weights[0, 0], unmasked[0, 0])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("sizes", SIZES, ids=str)
def test_fused_heads_equal_separate_heads(sizes, bias, seed):
    d_model, num_heads, batch, length, _ = sizes
    fused = MultiHeadAttention(MultiHeadConfig(d_model, num_heads, bias), _generator(seed))
    separate = separate_heads_from(fused.double())
    assert isinstance(separate, SeparateHeadsAttention) and len(separate.heads) == num_heads
    x, _, _ = _sequences(batch, length, length, d_model, seed)
    for mask in (None, torch.ones(length, length, dtype=torch.bool).tril()):
        output, weights = fused(x, mask=mask)
        separate_output, separate_weights = separate(x, mask=mask)
        torch.testing.assert_close(output, separate_output, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(weights, separate_weights, rtol=1e-12, atol=1e-12)


def test_each_head_is_equation_one_on_its_slice_of_the_projections():
    """Head h of the fused layer is scaled dot-product attention on columns hK..(h+1)K."""
    layer = MultiHeadAttention(MultiHeadConfig(12, 3), _generator(0)).double()
    x, _, _ = _sequences(1, 5, 5, 12, 0)
    _, weights = layer(x)
    for head in range(3):
        columns = slice(4 * head, 4 * head + 4)
        queries, keys, values = (
            getattr(layer, name)(x)[0, :, columns].detach().numpy()
            for name in ("W_Q", "W_K", "W_V")
        )
        _, expected = scaled_dot_product_attention(queries, keys, values)
        np.testing.assert_allclose(weights[0, head].detach().numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_weights_are_distributions_and_need_weights_false_returns_none(seed):
    layer = MultiHeadAttention(MultiHeadConfig(16, 4), _generator(seed))
    x = torch.randn(2, 7, 16, generator=_generator(seed + 1))
    output, weights = layer(x)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 4, 7))
    same_output, nothing = layer(x, need_weights=False)
    assert nothing is None
    torch.testing.assert_close(same_output, output)


@pytest.mark.parametrize("seed", range(3))
def test_permutation_equivariance_without_positions(seed):
    layer = MultiHeadAttention(MultiHeadConfig(16, 4), _generator(seed))
    x = torch.randn(1, 6, 16, generator=_generator(seed + 1))
    order = torch.randperm(6, generator=_generator(seed + 2))
    output, weights = layer(x)
    shuffled, shuffled_weights = layer(x[:, order])
    torch.testing.assert_close(shuffled, output[:, order])
    torch.testing.assert_close(shuffled_weights, weights[:, :, order][:, :, :, order])


def test_all_masked_query_gives_zeros_not_nan():
    layer = MultiHeadAttention(MultiHeadConfig(8, 2, bias=False), _generator(0))
    x = torch.randn(1, 3, 8, generator=_generator(1))
    mask = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    output, weights = layer(x, mask=mask)
    assert torch.isfinite(output).all()
    assert torch.equal(weights[0, :, 1], torch.zeros(2, 3))
    assert torch.equal(output[0, 1], torch.zeros(8))  # no bias: W_O of a zero vector


def test_initialisation_is_seeded_and_leaves_global_state_alone():
    state = torch.random.get_rng_state()
    first = MultiHeadAttention(MultiHeadConfig(16, 4), _generator(5))
    second = MultiHeadAttention(MultiHeadConfig(16, 4), _generator(5))
    assert torch.equal(torch.random.get_rng_state(), state)
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, second.state_dict()[name])


def test_parameter_count_does_not_depend_on_the_number_of_heads():
    counts = {
        heads: sum(p.numel() for p in MultiHeadAttention(MultiHeadConfig(512, heads)).parameters())
        for heads in (1, 2, 8, 64)
    }
    assert (
        set(counts.values()) == {4 * (512 * 512 + 512)} == {multi_head_cost(512, 8, 1).parameters}
    )
    separate = SeparateHeadsAttention(MultiHeadConfig(512, 8))
    assert sum(p.numel() for p in separate.parameters()) == counts[8]


@pytest.mark.parametrize(("d_model", "num_heads", "length"), [(16, 1, 7), (16, 4, 7), (64, 8, 5)])
def test_cost_formula_matches_measured_flops(d_model, num_heads, length):
    layer = MultiHeadAttention(MultiHeadConfig(d_model, num_heads))
    with FlopCounterMode(display=False) as counter:
        layer(torch.randn(1, length, d_model))
    cost = multi_head_cost(d_model, num_heads, length)
    assert counter.get_total_flops() == 2 * cost.total_macs  # one multiply-add = 2 FLOPs
    assert cost.score_macs == cost.mixing_macs == length * length * d_model


def test_cost_is_the_same_for_every_head_count():
    costs = {multi_head_cost(512, heads, 10) for heads in (1, 2, 4, 8, 16, 512)}
    assert len(costs) == 1
    assert multi_head_cost(512, 8, 10).total_macs == 4 * 10 * 512**2 + 2 * 10**2 * 512


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_model": 512, "num_heads": 7}, "num_heads=7 does not divide d_model=512"),
        ({"d_model": 10, "num_heads": 4}, "num_heads=4 does not divide d_model=10"),
        ({"d_model": 0, "num_heads": 1}, "d_model must be a positive int"),
        ({"d_model": 8, "num_heads": 0}, "num_heads must be a positive int"),
        ({"d_model": 8.0, "num_heads": 2}, "d_model must be a positive int"),
    ],
)
def test_config_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadConfig(**kwargs)
    with pytest.raises(ValueError, match=message):
        multi_head_cost(length=3, **kwargs)


def test_cost_rejects_bad_length():
    with pytest.raises(ValueError, match="length must be a positive int"):
        multi_head_cost(8, 2, 0)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ((torch.zeros(5, 8),), r"query must have shape \(B, T, D\).*rank 2"),
        ((torch.zeros(1, 1, 5, 8),), r"query must have shape \(B, T, D\).*rank 4"),
        ((torch.zeros(1, 5, 6),), "got last dimension 6"),
        ((torch.zeros(1, 5, 8), torch.zeros(1, 5, 6)), "key must have shape .* last dimension 6"),
        ((torch.zeros(1, 0, 8),), "query is empty"),
        ((torch.zeros(0, 2, 8),), "query is empty"),
        ((torch.zeros(1, 2, 8), torch.zeros(1, 0, 8)), "key is empty"),
        ((torch.zeros(1, 2, 8), torch.zeros(2, 3, 8)), "same batch size"),
        (
            (torch.zeros(1, 2, 8), torch.zeros(1, 3, 8), torch.zeros(1, 4, 8)),
            "must have the same length S, got 3 and 4",
        ),
    ],
)
def test_bad_inputs_raise(inputs, message):
    layer = MultiHeadAttention(MultiHeadConfig(8, 2))
    with pytest.raises(ValueError, match=message):
        layer(*inputs)


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (torch.ones(3, 3), "mask must be a boolean tensor"),
        (
            torch.ones(3, 4, dtype=torch.bool),
            r"to \(B, H, T, S\) = \(2, 2, 3, 3\)",
        ),
        (torch.ones(3, 2, 3, 3, dtype=torch.bool), "does not broadcast"),
        (torch.ones(1, 1, 2, 3, 3, dtype=torch.bool), "does not broadcast"),  # would add a dim
    ],
)
def test_bad_masks_raise(mask, message):
    layer = MultiHeadAttention(MultiHeadConfig(8, 2))
    with pytest.raises(ValueError, match=message):
        layer(torch.zeros(2, 3, 8), mask=mask)


def test_separate_heads_reject_bad_input():
    separate = SeparateHeadsAttention(MultiHeadConfig(8, 2))
    with pytest.raises(ValueError, match="got last dimension 4"):
        separate(torch.zeros(1, 3, 4))
    with pytest.raises(ValueError, match=r"does not broadcast to \(B, T, T\)"):
        separate(torch.zeros(1, 3, 8), mask=torch.ones(2, 3, 3, dtype=torch.bool))


def test_copy_from_torch_rejects_mismatches():
    with pytest.raises(ValueError, match="num_heads=2; target has d_model=8, num_heads=4"):
        copy_from_torch(MultiHeadAttention(MultiHeadConfig(8, 4)), nn.MultiheadAttention(8, 2))
    with pytest.raises(ValueError, match="bias mismatch"):
        copy_from_torch(
            MultiHeadAttention(MultiHeadConfig(8, 2, bias=False)), nn.MultiheadAttention(8, 2)
        )
    with pytest.raises(ValueError, match="one in_proj_weight"):
        copy_from_torch(
            MultiHeadAttention(MultiHeadConfig(8, 2)), nn.MultiheadAttention(8, 2, kdim=4, vdim=4)
        )


# --- the fast path: need_weights=False uses PyTorch's fused kernel ----------------------------


def _masks(batch, length, key_length, seed):
    """Every kind of mask the models use, including rows with no key allowed at all."""
    generator = _generator(seed)
    padding = torch.rand(batch, 1, 1, key_length, generator=generator) > 0.3  # (B, 1, 1, S)
    padding[:, ..., 0] = True  # at least one real key per sequence
    dead = padding.clone()
    dead[0] = False  # the first sequence is all padding: every one of its rows is dead
    causal = torch.ones(length, key_length, dtype=torch.bool).tril(key_length - length)  # (T, S)
    return {
        "none": None,
        "padding": padding,
        "causal": causal,
        "padding and causal": padding & causal,
        "all padding": dead,
        "per head": torch.rand(batch, 1, length, key_length, generator=generator) > 0.5,
    }


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("sizes", SIZES[1:], ids=str)
@pytest.mark.parametrize(
    "mask_name", ["none", "padding", "causal", "padding and causal", "all padding", "per head"]
)
def test_fast_path_equals_the_weights_path(sizes, seed, mask_name):
    d_model, num_heads, batch, length, key_length = sizes
    layer = MultiHeadAttention(MultiHeadConfig(d_model, num_heads), _generator(seed)).double()
    x = torch.randn(batch, length, d_model, generator=_generator(seed + 1), dtype=torch.float64)
    memory = torch.randn(
        batch, key_length, d_model, generator=_generator(seed + 2), dtype=torch.float64
    )
    mask = _masks(batch, length, key_length, seed)[mask_name]
    slow, weights = layer(x, memory, mask=mask, need_weights=True)
    fast, nothing = layer(x, memory, mask=mask, need_weights=False)
    assert nothing is None and weights is not None
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=0)
    assert torch.isfinite(fast).all()


def test_fast_path_in_float32_and_its_gradients():
    layer = MultiHeadAttention(MultiHeadConfig(32, 4), _generator(0))
    x = torch.randn(3, 6, 32, generator=_generator(1))
    mask = _masks(3, 6, 6, 0)["all padding"]
    results = {}
    for need_weights in (True, False):
        layer.zero_grad()
        inputs = x.clone().requires_grad_()
        output, _ = layer(inputs, mask=mask, need_weights=need_weights)
        (output * torch.linspace(-1, 1, 32)).sum().backward()
        grads = [inputs.grad, *(p.grad for p in layer.parameters())]
        assert all(torch.isfinite(grad).all() for grad in grads), "NaN in a gradient"
        results[need_weights] = output.detach(), grads
    torch.testing.assert_close(results[False][0], results[True][0], atol=1e-6, rtol=1e-5)
    for fast, slow in zip(results[False][1], results[True][1], strict=True):
        torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-4)


def test_fast_path_gives_dead_rows_zeros_not_nan():
    """A query with no key allowed: zero attention output, so W_O gives just its bias."""
    layer = MultiHeadAttention(MultiHeadConfig(8, 2), _generator(0))
    x = torch.randn(1, 3, 8, generator=_generator(1))
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
    output, _ = layer(x, mask=mask, need_weights=False)  # row 1 sees nothing
    torch.testing.assert_close(output[0, 1], layer.W_O.bias.detach())
    assert torch.isfinite(output).all()
