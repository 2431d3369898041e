"""Tests for transformer_tutorial.model.masks (paper section 3.2.3)."""

import numpy as np
import pytest
import torch

from transformer_tutorial.model.attention import scaled_dot_product_attention_torch
from transformer_tutorial.model.masks import (
    causal_mask,
    combine_masks,
    naive_masked_softmax,
    padding_mask,
    padding_mask_from_ids,
)


@pytest.mark.parametrize("length", [1, 2, 5, 9])
def test_causal_mask_is_the_lower_triangle(length):
    mask = causal_mask(length)
    assert mask.dtype == torch.bool
    assert mask.shape == (length, length)
    torch.testing.assert_close(mask, torch.ones(length, length).tril().bool())


def test_causal_mask_with_earlier_keys_lets_each_query_see_its_past():
    mask = causal_mask(2, 5)  # queries are positions 3 and 4 of 5
    expected = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    torch.testing.assert_close(mask, expected)
    torch.testing.assert_close(causal_mask(5)[3:], causal_mask(2, 5))


def test_padding_mask_from_lengths():
    mask = padding_mask([3, 1, 0], max_length=4)
    assert mask.shape == (3, 1, 1, 4)
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    torch.testing.assert_close(mask[:, 0, 0], expected)
    assert padding_mask(torch.tensor([2, 3])).shape == (2, 1, 1, 3)


def test_padding_mask_from_ids_agrees_with_lengths_for_right_padding():
    ids = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0]])
    torch.testing.assert_close(padding_mask_from_ids(ids, 0), padding_mask([3, 1], 4))
    left = torch.tensor([[0, 0, 4, 5]])  # left padding works too
    torch.testing.assert_close(padding_mask_from_ids(left, 0)[0, 0, 0], left[0] != 0)


def test_combine_broadcasts_causal_and_padding_to_b1ts():
    combined = combine_masks(causal_mask(4), padding_mask([2, 4]))
    assert combined.shape == (2, 1, 4, 4)
    for b, length in enumerate([2, 4]):
        for t in range(4):
            for s in range(4):
                assert bool(combined[b, 0, t, s]) == (s <= t and s < length)
    assert combine_masks(None, None) is None
    torch.testing.assert_close(combine_masks(causal_mask(3), None), causal_mask(3))


def test_naive_softmax_gives_nan_on_an_all_masked_row_and_the_library_does_not():
    scores = np.array([[1.0, 2.0, 3.0], [0.5, 0.1, 0.2]])
    mask = np.array([[True, True, False], [False, False, False]])
    naive = naive_masked_softmax(scores, mask)
    np.testing.assert_allclose(naive[0], [np.exp(-1) / (1 + np.exp(-1)), 1 / (1 + np.exp(-1)), 0])
    assert np.isnan(naive[1]).all()
    queries = torch.randn(1, 2, 4)
    values = torch.randn(1, 3, 4)
    output, weights = scaled_dot_product_attention_torch(
        queries, torch.randn(1, 3, 4), values, torch.tensor(mask)[None]
    )
    assert torch.isfinite(output).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(weights[0, 1], torch.zeros(3))
    torch.testing.assert_close(weights[0, 0].sum(), torch.tensor(1.0))


def test_masked_keys_get_exactly_zero_weight_and_rows_sum_to_one():
    generator = torch.Generator().manual_seed(0)
    queries, keys, values = (torch.randn(2, 3, 5, 8, generator=generator) for _ in range(3))
    mask = combine_masks(causal_mask(5), padding_mask([4, 5]))  # (2, 1, 5, 5)
    _, weights = scaled_dot_product_attention_torch(queries, keys, values, mask)
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: causal_mask(0), "length"),
        (lambda: causal_mask(4, 3), "key_length=3 < length=4"),
        (lambda: padding_mask([]), "non-empty 1-D"),
        (lambda: padding_mask([[1, 2]]), "non-empty 1-D"),
        (lambda: padding_mask([1.5]), "integers"),
        (lambda: padding_mask([-1, 2]), ">= 0"),
        (lambda: padding_mask([5], max_length=4), "does not fit max_length=4"),
        (lambda: padding_mask([0, 0]), "max_length"),
        (lambda: padding_mask_from_ids(torch.ones(3, dtype=torch.long), 0), r"\(B, S\)"),
        (lambda: padding_mask_from_ids(torch.ones(2, 3), 0), "integer tensor"),
        (lambda: combine_masks(torch.ones(2, 2)), "boolean"),
        (
            lambda: combine_masks(causal_mask(3), padding_mask([1, 2], 4)),
            "do not broadcast",
        ),
        (lambda: naive_masked_softmax(np.ones((2, 3)), np.ones((2, 2), bool)), "broadcast"),
    ],
)
def test_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
