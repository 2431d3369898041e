"""Tests for transformer_tutorial.attention (paper section 3.2.1, equation 1)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from transformer_tutorial.attention import scaled_dot_product_attention, softmax

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


@pytest.mark.parametrize(
    ("queries", "keys", "values", "message"),
    [
        (np.zeros(4), np.zeros((3, 4)), np.zeros((3, 4)), "queries must have shape"),
        (np.zeros((2, 3, 4)), np.zeros((3, 4)), np.zeros((3, 4)), "same rank"),
        (np.zeros((2, 4)), np.zeros((3, 5)), np.zeros((3, 4)), "must share K, got 4 and 5"),
        (np.zeros((2, 4)), np.zeros((3, 4)), np.zeros((2, 4)), "must share S, got 3 and 2"),
        (np.zeros((0, 4)), np.zeros((3, 4)), np.zeros((3, 4)), "empty input"),
        (np.zeros((2, 4)), np.zeros((0, 4)), np.zeros((0, 4)), "empty input"),
    ],
)
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
