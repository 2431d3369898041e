"""Tests for transformer_tutorial.model.attention (paper section 3.2.1, equation 1) and
transformer_tutorial.studies.attention_scaling (what the division by sqrt(d_k) protects)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from transformer_tutorial.model.attention import (
    SelfAttention,
    SelfAttentionConfig,
    dot_product_std,
    scaled_dot_product_attention,
    scaled_dot_product_attention_torch,
    softmax,
)
from transformer_tutorial.studies.attention_scaling import softmax_saturation

BAD_SHAPES = [  # (queries, keys, values, the error it must raise), for NumPy and torch alike
    (np.zeros(4), np.zeros((3, 4)), np.zeros((3, 4)), "queries must have shape"),
    (np.zeros((2, 3, 4)), np.zeros((3, 4)), np.zeros((3, 4)), "same rank"),
    (np.zeros((2, 4)), np.zeros((3, 5)), np.zeros((3, 4)), "must share K, got 4 and 5"),
    (np.zeros((2, 4)), np.zeros((3, 4)), np.zeros((2, 4)), "must share S, got 3 and 2"),
    (np.zeros((0, 4)), np.zeros((3, 4)), np.zeros((3, 4)), "empty input"),
    (np.zeros((2, 4)), np.zeros((0, 4)), np.zeros((0, 4)), "empty input"),
]

SHAPES = [  # (leading dims, T, S, K, V)
    ((), 1, 1, 1, 1),
    ((), 3, 3, 4, 4),
    ((2,), 5, 7, 8, 3),
    ((2, 3), 4, 6, 16, 16),
]


def _inputs(shape, seed):
    lead, t, s, k, v = shape
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(*lead, t, k)),
        rng.normal(size=(*lead, s, k)),
        rng.normal(size=(*lead, s, v)),
    )


def test_softmax_worked_example():
    # scores [2, 1, 0] -> exp = [7.389, 2.718, 1], sum 11.107 -> [0.665, 0.245, 0.090]
    np.testing.assert_allclose(softmax([2.0, 1.0, 0.0]), [0.665, 0.245, 0.090], atol=5e-4)
    np.testing.assert_allclose(
        softmax([2.0, 1.0, 0.0]), np.exp([2, 1, 0]) / np.exp([2, 1, 0]).sum(), rtol=1e-15
    )


@pytest.mark.parametrize("seed", range(3))
def test_softmax_is_shift_invariant_and_matches_torch(seed):
    scores = np.random.default_rng(seed).normal(size=(4, 9)) * 5
    weights = softmax(scores)
    np.testing.assert_allclose(weights, softmax(scores + 123.0), rtol=1e-12)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(weights, torch.softmax(torch.tensor(scores), -1).numpy(), rtol=1e-12)


def test_softmax_does_not_overflow():
    weights = softmax(np.array([1e4, 0.0, -1e4]))
    assert np.isfinite(weights).all()
    np.testing.assert_allclose(weights, [1.0, 0.0, 0.0])
    np.testing.assert_allclose(softmax(np.array([1e4, 1e4])), [0.5, 0.5])


def test_softmax_masked_entries_and_all_masked_rows():
    weights = softmax(np.array([[1.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]]))
    np.testing.assert_allclose(weights, [[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]])


def test_softmax_rejects_bad_scores():
    with pytest.raises(ValueError, match="at least one score"):
        softmax(np.zeros((3, 0)))
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        softmax(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        softmax(np.array([1.0, np.inf]))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_pytorch(shape, seed):
    queries, keys, values = _inputs(shape, seed)
    output, weights = scaled_dot_product_attention(queries, keys, values)
    expected = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (queries, keys, values)))
    torch.testing.assert_close(torch.tensor(output), expected, rtol=1e-10, atol=1e-12)
    assert weights.shape == (*shape[0], shape[1], shape[2])
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)
    assert (weights >= 0).all()


@pytest.mark.parametrize("seed", range(3))
def test_mask_matches_pytorch_boolean_mask(seed):
    queries, keys, values = _inputs(((2,), 5, 5, 4, 4), seed)
    causal = np.tril(np.ones((5, 5), dtype=bool))  # (T, S): True = may attend
    output, weights = scaled_dot_product_attention(queries, keys, values, mask=causal)
    expected = F.scaled_dot_product_attention(
        *(torch.tensor(a) for a in (queries, keys, values)), attn_mask=torch.tensor(causal)
    )
    torch.testing.assert_close(torch.tensor(output), expected, rtol=1e-10, atol=1e-12)
    assert (weights[..., ~causal] == 0).all()


def test_output_is_the_weighted_average_of_values():
    queries, keys, values = _inputs(((), 3, 4, 2, 5), 0)
    output, weights = scaled_dot_product_attention(queries, keys, values)
    for t in range(3):
        np.testing.assert_allclose(output[t], sum(weights[t, s] * values[s] for s in range(4)))


def test_scores_are_divided_by_sqrt_dk():
    queries = np.array([[1.0, 1.0, 1.0, 1.0]])
    keys = np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    _, weights = scaled_dot_product_attention(queries, keys, np.eye(2))
    # scores are q.k / sqrt(4) = [2, 0]
    np.testing.assert_allclose(weights, softmax(np.array([[2.0, 0.0]])))


@pytest.mark.parametrize("seed", range(3))
def test_permutation_equivariance(seed):
    """Without positions, shuffling the tokens only shuffles the outputs the same way."""
    tokens = np.random.default_rng(seed).normal(size=(6, 8))
    order = np.random.default_rng(seed + 100).permutation(6)
    output, weights = scaled_dot_product_attention(tokens, tokens, tokens)
    shuffled, shuffled_weights = scaled_dot_product_attention(
        tokens[order], tokens[order], tokens[order]
    )
    np.testing.assert_allclose(shuffled, output[order], atol=1e-12)
    np.testing.assert_allclose(shuffled_weights, weights[np.ix_(order, order)], atol=1e-12)


def test_all_masked_row_gives_zeros_not_nan():
    queries, keys, values = _inputs(((), 2, 3, 4, 4), 0)
    mask = np.array([[True, True, False], [False, False, False]])
    output, weights = scaled_dot_product_attention(queries, keys, values, mask=mask)
    assert np.isfinite(output).all() and np.isfinite(weights).all()
    np.testing.assert_array_equal(weights[1], 0.0)
    np.testing.assert_array_equal(output[1], 0.0)


@pytest.mark.parametrize(("queries", "keys", "values", "message"), BAD_SHAPES)
def test_bad_shapes_raise(queries, keys, values, message):
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(queries, keys, values)


def test_bad_masks_raise():
    queries, keys, values = _inputs(((), 2, 3, 4, 4), 0)
    with pytest.raises(ValueError, match="mask must be boolean"):
        scaled_dot_product_attention(queries, keys, values, mask=np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"does not broadcast to the scores' shape \(2, 3\)"):
        scaled_dot_product_attention(queries, keys, values, mask=np.ones((3, 2), dtype=bool))
    with pytest.raises(ValueError, match="does not broadcast"):  # would silently add a batch dim
        scaled_dot_product_attention(queries, keys, values, mask=np.ones((5, 2, 3), dtype=bool))


# --- the PyTorch version -------------------------------------------------------------------


def _tensors(*arrays):
    return tuple(torch.tensor(array) for array in arrays)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("shape", SHAPES)
def test_torch_matches_numpy_and_pytorch(shape, seed):
    queries, keys, values = _inputs(shape, seed)
    output, weights = scaled_dot_product_attention_torch(*_tensors(queries, keys, values))
    numpy_output, numpy_weights = scaled_dot_product_attention(queries, keys, values)
    torch.testing.assert_close(output, torch.tensor(numpy_output), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights, torch.tensor(numpy_weights), rtol=1e-12, atol=1e-12)
    expected = F.scaled_dot_product_attention(*_tensors(queries, keys, values))
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    "mask_shape", [(5, 7), (1, 5, 7), (2, 5, 7), (2, 1, 7), (7,)], ids=lambda shape: str(shape)
)
def test_torch_mask_matches_numpy_and_pytorch(mask_shape, seed):
    queries, keys, values = _inputs(((2,), 5, 7, 8, 3), seed)
    mask = np.random.default_rng(seed + 10).random(mask_shape) < 0.7
    mask[..., 0] = True  # every query keeps one key: PyTorch's own function gives NaN otherwise
    output, weights = scaled_dot_product_attention_torch(
        *_tensors(queries, keys, values), mask=torch.tensor(mask)
    )
    numpy_output, numpy_weights = scaled_dot_product_attention(queries, keys, values, mask=mask)
    torch.testing.assert_close(output, torch.tensor(numpy_output), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights, torch.tensor(numpy_weights), rtol=1e-12, atol=1e-12)
    expected = F.scaled_dot_product_attention(
        *_tensors(queries, keys, values), attn_mask=torch.tensor(mask)
    )
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-12)
    assert (weights[~torch.tensor(mask).expand_as(weights)] == 0).all()


def test_torch_all_masked_row_gives_zeros_and_finite_gradients():
    queries, keys, values = (
        tensor.requires_grad_() for tensor in _tensors(*_inputs(((), 2, 3, 4, 4), 0))
    )
    mask = torch.tensor([[True, True, False], [False, False, False]])
    output, weights = scaled_dot_product_attention_torch(queries, keys, values, mask=mask)
    assert torch.equal(weights[1], torch.zeros(3)) and torch.equal(output[1], torch.zeros(4))
    output.sum().backward()
    for tensor in (queries, keys, values):
        assert torch.isfinite(tensor.grad).all()
    assert torch.equal(queries.grad[1], torch.zeros(4))  # the empty row depends on nothing


def test_torch_does_not_overflow():
    # q . k / sqrt(d_k) = 100 * 100 / 1 = 1e4 for key 0, 0 for key 1
    queries = torch.tensor([[100.0]])
    keys = torch.tensor([[100.0], [0.0]])
    _, weights = scaled_dot_product_attention_torch(queries, keys, torch.eye(2))
    torch.testing.assert_close(weights, torch.tensor([[1.0, 0.0]]))


@pytest.mark.parametrize(("queries", "keys", "values", "message"), BAD_SHAPES)
def test_torch_bad_shapes_raise_like_numpy(queries, keys, values, message):
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention_torch(*_tensors(queries, keys, values))


def test_torch_bad_masks_raise():
    queries, keys, values = _tensors(*_inputs(((), 2, 3, 4, 4), 0))
    with pytest.raises(ValueError, match="mask must be a boolean tensor"):
        scaled_dot_product_attention_torch(queries, keys, values, mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="mask must be a boolean tensor"):
        scaled_dot_product_attention_torch(queries, keys, values, mask=np.ones((2, 3), bool))
    with pytest.raises(ValueError, match=r"does not broadcast to the scores' shape \(2, 3\)"):
        scaled_dot_product_attention_torch(
            queries, keys, values, mask=torch.ones(3, 2, dtype=torch.bool)
        )
    with pytest.raises(ValueError, match="does not broadcast"):
        scaled_dot_product_attention_torch(
            queries, keys, values, mask=torch.ones(5, 2, 3, dtype=torch.bool)
        )


# --- why divide by sqrt(d_k) ---------------------------------------------------------------


@pytest.mark.parametrize("d_k", [1, 4, 16, 64, 256, 512])
def test_unscaled_std_grows_like_sqrt_dk_and_scaled_stays_near_one(d_k):
    unscaled, scaled = dot_product_std(d_k, samples=20_000, seed=d_k)
    assert unscaled == pytest.approx(np.sqrt(d_k), rel=0.05)
    assert scaled == pytest.approx(1.0, rel=0.05)
    assert unscaled == pytest.approx(scaled * np.sqrt(d_k), rel=1e-12)


def test_dot_product_std_is_seeded_and_rejects_bad_input():
    assert dot_product_std(8, 100, seed=3) == dot_product_std(8, 100, seed=3)
    assert dot_product_std(8, 100, seed=3) != dot_product_std(8, 100, seed=4)
    for bad in ({"d_k": 0}, {"d_k": 2.5}, {"d_k": True}, {"d_k": 4, "samples": 0}):
        with pytest.raises(ValueError, match="must be a positive int"):
            dot_product_std(**{"samples": 10, **bad})
    with pytest.raises(ValueError, match="at least 2"):
        dot_product_std(4, samples=1)


# --- one head as a module ------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    ("d_model", "d_k", "d_v", "bias"), [(4, 4, None, False), (8, 3, 5, True), (16, 16, 2, False)]
)
def test_self_attention_is_equation_one_with_its_projections(d_model, d_k, d_v, bias, seed):
    config = SelfAttentionConfig(d_model=d_model, d_k=d_k, d_v=d_v, bias=bias)
    head = SelfAttention(config, generator=torch.Generator().manual_seed(seed)).double()
    x = torch.randn(2, 5, d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    output, weights = head(x)
    assert output.shape == (2, 5, config.value_width) and weights.shape == (2, 5, 5)
    projected = [
        (x @ layer.weight.T + (layer.bias if bias else 0)).detach().numpy()
        for layer in (head.W_Q, head.W_K, head.W_V)
    ]  # X W for each of W_Q, W_K, W_V, by hand
    expected, expected_weights = scaled_dot_product_attention(*projected)
    torch.testing.assert_close(output, torch.tensor(expected), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights, torch.tensor(expected_weights), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 5, dtype=torch.float64))


@pytest.mark.parametrize("seed", range(3))
def test_self_attention_is_permutation_equivariant(seed):
    head = SelfAttention(SelfAttentionConfig(d_model=8, d_k=4), torch.Generator().manual_seed(seed))
    x = torch.randn(1, 6, 8, generator=torch.Generator().manual_seed(seed + 50))
    order = torch.randperm(6, generator=torch.Generator().manual_seed(seed + 100))
    output, weights = head(x)
    shuffled, shuffled_weights = head(x[:, order])
    torch.testing.assert_close(shuffled, output[:, order])
    torch.testing.assert_close(shuffled_weights, weights[:, order][:, :, order])


def test_self_attention_initialisation_is_seeded_and_leaves_global_state_alone():
    config = SelfAttentionConfig(d_model=8, d_k=4, bias=True)
    state = torch.random.get_rng_state()
    first = SelfAttention(config, generator=torch.Generator().manual_seed(1))
    assert torch.equal(torch.random.get_rng_state(), state)
    second = SelfAttention(config, generator=torch.Generator().manual_seed(1))
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, second.state_dict()[name])
        assert tensor.abs().max() <= 1 / np.sqrt(8)  # PyTorch's default U(-1/sqrt(in), 1/sqrt(in))
    assert not torch.equal(first.W_Q.weight, first.W_K.weight)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_model": 0}, "d_model must be a positive int"),
        ({"d_k": 2.0}, "d_k must be a positive int"),
        ({"d_v": -1}, "d_v must be a positive int"),
    ],
)
def test_self_attention_config_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SelfAttentionConfig(**kwargs)


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (torch.zeros(5, 8), r"x must have shape \(B, T, D\).*rank 2"),
        (torch.zeros(1, 5, 7), "got last dimension 7"),
        (torch.zeros(1, 0, 8), "x is empty"),
        (torch.zeros(0, 3, 8), "x is empty"),
        (np.zeros((1, 3, 8)), "x must be a tensor"),
    ],
)
def test_self_attention_rejects_bad_input(x, message):
    head = SelfAttention(SelfAttentionConfig(d_model=8, d_k=4))
    with pytest.raises(ValueError, match=message):
        head(x)


def test_self_attention_causal_mask():
    head = SelfAttention(SelfAttentionConfig(d_model=8, d_k=4), torch.Generator().manual_seed(0))
    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(1))
    causal = torch.ones(4, 4, dtype=torch.bool).tril()  # (T, T): True = may attend
    _, weights = head(x, mask=causal)
    assert (weights[:, ~causal] == 0).all()
    torch.testing.assert_close(weights[:, 0, 0], torch.ones(2))


def test_softmax_saturation_unscaled_collapses_scaled_does_not():
    top_1, gradient_1 = softmax_saturation(1, scaled=False)
    assert (top_1, gradient_1) == softmax_saturation(1, scaled=True)  # sqrt(1) = 1
    unscaled = [softmax_saturation(d, scaled=False) for d in (4, 64, 512)]
    scaled = [softmax_saturation(d, scaled=True) for d in (4, 64, 512)]
    # unscaled: the largest weight heads for 1 and the gradient for 0 as d_k grows
    assert unscaled[0][0] < unscaled[1][0] < unscaled[2][0] and unscaled[2][0] > 0.9
    assert unscaled[0][1] > unscaled[1][1] > unscaled[2][1] and unscaled[2][1] < 0.1
    # scaled: both stay where they are at d_k = 1
    for top, gradient in scaled:
        assert top == pytest.approx(top_1, abs=0.07)
        assert gradient == pytest.approx(gradient_1, abs=0.03)


def test_softmax_saturation_jacobian_matches_autograd():
    weights_top, gradient = softmax_saturation(3, scaled=True, rows=1, keys=4, seed=5)
    rng = np.random.default_rng(5)
    query = rng.standard_normal((1, 1, 3))
    keys = rng.standard_normal((1, 4, 3))
    scores = torch.tensor((query @ keys.transpose(0, 2, 1))[0, 0] / np.sqrt(3))
    jacobian = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), scores)
    assert gradient == pytest.approx(torch.linalg.norm(jacobian).item(), rel=1e-10)
    assert weights_top == pytest.approx(torch.softmax(scores, -1).max().item(), rel=1e-12)


@pytest.mark.parametrize("bad", [{"d_k": 0}, {"d_k": 2.5}, {"rows": 0}, {"keys": -1}])
def test_softmax_saturation_rejects_bad_input(bad):
    arguments = {"d_k": 4, "scaled": True} | bad
    with pytest.raises(ValueError, match="must be a positive int"):
        softmax_saturation(**arguments)
