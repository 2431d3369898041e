"""Tests for studies/ffn_analysis.py: linearity gaps, convex hulls, the token-table
task and the sentence task of chapter "Feed-forward network"."""

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from transformer_tutorial.model.attention import scaled_dot_product_attention
from transformer_tutorial.model.feed_forward import FeedForward, FeedForwardConfig
from transformer_tutorial.model.multi_head import MultiHeadAttention, MultiHeadConfig
from transformer_tutorial.studies.ffn_analysis import (
    ANIMALS,
    PLAUSIBLE,
    VERBS,
    WORDS,
    SentenceConfig,
    TokenMixer,
    TokenTaskConfig,
    accuracy_alone,
    additivity_gap,
    all_patterns,
    convex_hull,
    feed_forward_trace,
    homogeneity_gap,
    inside_convex_polygon,
    predictions_alone,
    self_weight_by_target,
    sentence_data,
    token_accuracy,
    token_batch,
    train_sentence_model,
    train_token_model,
    truth_table,
    yes_probability,
)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def attention_only():
    return train_token_model(TokenTaskConfig(feed_forward=False, num_layers=2)).model


@pytest.fixture(scope="module")
def with_feed_forward():
    return train_token_model(TokenTaskConfig()).model


@pytest.fixture(scope="module")
def sentence_model():
    return train_sentence_model(SentenceConfig()).model


# --- linearity gaps ----------------------------------------------------------------------


def _inputs(seed=0, d_model=8):
    generator = _generator(seed)
    x = torch.randn(2, 5, d_model, dtype=torch.float64, generator=generator)
    y = torch.randn(2, 5, d_model, dtype=torch.float64, generator=generator)
    return x, y


def _attention(d_model=8, seed=0):
    layer = MultiHeadAttention(MultiHeadConfig(d_model, 2, bias=False), generator=_generator(seed))
    layer = layer.double()
    return lambda x: layer(x)[0]


def _relu_ffn(d_model=8, seed=0, activation="relu"):
    config = FeedForwardConfig(d_model, activation=activation, bias=False)
    return FeedForward(config, generator=_generator(seed)).double()


@pytest.mark.parametrize("seed", range(3))
def test_a_linear_map_has_no_gaps(seed):
    x, y = _inputs(seed)
    linear_map = nn.Linear(8, 8, bias=False, dtype=torch.float64)
    for scale in (2.0, -1.0, 0.3):
        assert homogeneity_gap(linear_map, x, scale) < 1e-12
    assert additivity_gap(linear_map, x, y) < 1e-12


@pytest.mark.parametrize("seed", range(3))
def test_attention_is_odd_but_not_linear(seed):
    """Without biases, scores (-x W_Q)(-x W_K)^T = scores: the weights do not change and the
    values flip sign, so attention(-x) = -attention(x) exactly; any other scale changes the
    softmax's temperature."""
    x, y = _inputs(seed)
    attention = _attention(seed=seed)
    assert homogeneity_gap(attention, x, -1.0) < 1e-12
    assert homogeneity_gap(attention, x, 2.0) > 0.05
    assert additivity_gap(attention, x, y) > 0.05


@pytest.mark.parametrize("seed", range(3))
def test_relu_ffn_is_positively_homogeneous_but_not_linear(seed):
    x, y = _inputs(seed)
    ffn = _relu_ffn(seed=seed)
    assert homogeneity_gap(ffn, x, 2.0) < 1e-12
    assert homogeneity_gap(ffn, x, -1.0) > 0.1
    assert additivity_gap(ffn, x, y) > 0.1
    assert homogeneity_gap(_relu_ffn(seed=seed, activation="gelu"), x, 2.0) > 1e-3


def test_gap_hand_computed():
    square = lambda x: x**2  # noqa: E731
    x, y = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 0.0])
    assert homogeneity_gap(square, x, 2.0) == pytest.approx(1.0)  # |4x^2 - 2x^2| / |2x^2|
    # f(x + y) - f(x) - f(y) = 2xy = [6, 0]; f(x) + f(y) = [10, 4]
    assert additivity_gap(square, x, y) == pytest.approx(6 / np.hypot(10, 4))


def test_gap_errors():
    x, y = _inputs()
    identity = lambda x: x  # noqa: E731
    for scale in (0.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="scale must be finite and non-zero"):
            homogeneity_gap(identity, x, scale)
    with pytest.raises(ValueError, match=r"same shape, got \(2, 5, 8\) and \(2, 5\)"):
        additivity_gap(identity, x, y[..., 0])
    with pytest.raises(ValueError, match="reference output is zero"):
        homogeneity_gap(torch.zeros_like, x, 2.0)


# --- convex hulls ----------------------------------------------------------------------


def test_convex_hull_of_a_square_with_inner_points():
    points = np.array([[0, 0], [1, 1], [2, 0], [0.5, 0.5], [2, 2], [0, 2], [1, 0], [1.5, 1.0]])
    hull = convex_hull(points)
    assert hull.tolist() == [[0, 0], [2, 0], [2, 2], [0, 2]]  # counter-clockwise, no mid-edge
    assert inside_convex_polygon(points, hull).all()
    outside = np.array([[-0.1, 1.0], [1.0, 2.1], [3.0, 3.0]])
    assert not inside_convex_polygon(outside, hull).any()
    assert inside_convex_polygon(np.array([[1.0, 2.0], [2.0, 2.0]]), hull).all()  # on the edge


@pytest.mark.parametrize("seed", range(5))
def test_hull_contains_every_point_and_corners_are_points(seed):
    points = np.random.default_rng(seed).normal(size=(30, 2))
    hull = convex_hull(points)
    assert inside_convex_polygon(points, hull).all()
    assert all(any(np.array_equal(corner, point) for point in points) for corner in hull)
    # counter-clockwise: positive signed area (shoelace formula)
    area = 0.5 * np.sum(hull[:, 0] * np.roll(hull[:, 1], -1) - np.roll(hull[:, 0], -1) * hull[:, 1])
    assert area > 0


@pytest.mark.parametrize("seed", range(3))
def test_one_head_stays_inside_the_hull_of_its_values(seed):
    rng = np.random.default_rng(seed)
    keys, values = rng.normal(size=(6, 4)), rng.normal(size=(6, 2))
    queries = 3 * rng.normal(size=(200, 4))  # sharp and flat softmaxes alike
    outputs, weights = scaled_dot_product_attention(queries, keys, values)
    assert weights.min() >= 0 and np.allclose(weights.sum(axis=1), 1)
    assert inside_convex_polygon(outputs, convex_hull(values)).all()
    assert not inside_convex_polygon(2 * outputs + 5, convex_hull(values)).all()


def test_hull_errors():
    with pytest.raises(ValueError, match=r"points must have shape \(N, 2\) with N >= 3"):
        convex_hull(np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"points must have shape \(N, 2\)"):
        convex_hull(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="on one line"):
        convex_hull(np.array([[0, 0], [1, 1], [2, 2], [3, 3]]))
    square = np.array([[0, 0], [1, 0], [1, 1], [0, 1]])
    with pytest.raises(ValueError, match=r"points must have shape \(P, 2\)"):
        inside_convex_polygon(np.zeros(2), square)
    with pytest.raises(ValueError, match=r"polygon must have shape \(M, 2\) with M >= 3"):
        inside_convex_polygon(np.zeros((1, 2)), square[:2])


# --- the token-table task --------------------------------------------------------------


def test_patterns_and_tables():
    assert all_patterns(2).tolist() == [[-1, -1], [1, -1], [-1, 1], [1, 1]]
    assert truth_table(TokenTaskConfig()).tolist() == [0, 1, 1, 0]  # XOR
    parity = truth_table(TokenTaskConfig(bits=3))
    assert parity.tolist() == [0, 1, 1, 0, 1, 0, 0, 1]
    random = TokenTaskConfig(bits=8, table="random")
    table = truth_table(random)
    assert table.shape == (256,) and torch.equal(table, truth_table(random))
    assert 0.3 < table.float().mean() < 0.7
    other = truth_table(dataclasses.replace(random, table_seed=2))
    assert not torch.equal(table, other)


def test_token_batch_answers_each_token_by_its_own_features():
    config = TokenTaskConfig(bits=3)
    features, targets = token_batch(config, 16, 5, _generator(0))
    assert features.shape == (16, 5, 3) and targets.shape == (16, 5)
    assert set(features.unique().tolist()) == {-1.0, 1.0}
    assert torch.equal(targets, ((features > 0).sum(dim=-1) % 2).long())  # parity
    again, _ = token_batch(config, 16, 5, _generator(0))
    assert torch.equal(features, again)


def test_config_and_model_reject_bad_input():
    for bad in (dict(bits=0), dict(bits=13), dict(table="xor"), dict(num_heads=3)):
        with pytest.raises(ValueError):
            TokenTaskConfig(**bad)
    model = TokenMixer(TokenTaskConfig(), generator=_generator(0))
    with pytest.raises(ValueError, match=r"features must have shape \(B, T, 2\)"):
        model(torch.zeros(4, 3, 3))
    with pytest.raises(ValueError, match=r"features must have shape \(B, T, 2\)"):
        model(torch.zeros(4, 0, 2))
    logits, weights = model(torch.zeros(4, 3, 2))
    assert logits.shape == (4, 3, 2) and len(weights) == 1 and weights[0].shape == (4, 2, 3, 3)


def test_the_two_chapter_models_have_about_the_same_size(attention_only, with_feed_forward):
    sizes = [sum(p.numel() for p in m.parameters()) for m in (attention_only, with_feed_forward)]
    assert sizes == [2258, 2242]
    assert attention_only.feed_forward is None and len(attention_only.attention) == 2


def test_training_is_reproducible_and_restores_the_thread_count():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        config = TokenTaskConfig(steps=5)
        first, second = train_token_model(config), train_token_model(config)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert first.losses == second.losses and len(first.losses) == 5
    assert first.losses != train_token_model(dataclasses.replace(config, seed=1)).losses


def test_attention_alone_learns_xor_in_context(attention_only):
    assert token_accuracy(attention_only) > 0.95
    weights = self_weight_by_target(attention_only)  # (H, 2)
    assert weights.shape == (2, 2)
    assert np.abs(weights[:, 0] - weights[:, 1]).max() > 0.1  # the self-weight knows the answer


def test_attention_alone_is_affine_for_a_token_alone(attention_only):
    """One key means weight 1: the model is an affine map of the +-1 features, so its logits
    obey l(--) + l(++) = l(+-) + l(-+), and it can get at most 3 of XOR's 4 patterns right."""
    with torch.no_grad():
        logits, _ = attention_only(all_patterns(2)[:, None, :])  # (4, 1, 2)
    logits = logits[:, 0].double()
    torch.testing.assert_close(logits[0] + logits[3], logits[1] + logits[2], atol=1e-5, rtol=0)
    assert accuracy_alone(attention_only) <= 0.75


def test_the_ffn_computes_xor_on_the_token_itself(with_feed_forward):
    assert token_accuracy(with_feed_forward) > 0.95
    assert predictions_alone(with_feed_forward).tolist() == [0, 1, 1, 0]
    assert accuracy_alone(with_feed_forward) == 1.0


def test_self_weight_errors(attention_only):
    with pytest.raises(ValueError, match=r"layer must be in \[0, 2\)"):
        self_weight_by_target(attention_only, layer=2)


# --- the sentence task -----------------------------------------------------------------


def test_sentence_data():
    ids, answers = sentence_data()
    assert ids.shape == (16, 3) and answers.shape == (16,)
    assert [WORDS[i] for i in ids[4].tolist()] == ["the", "dog", "sleeps"]
    assert WORDS[int(answers[2])] == "no"  # the cat swims
    assert (answers == WORDS.index("yes")).sum() == PLAUSIBLE.sum() == 10
    # cat/fish x sleeps/swims is an XOR, so no "animal score + verb score" gives the table
    rows = [ANIMALS.index("cat"), ANIMALS.index("fish")]
    columns = [VERBS.index("sleeps"), VERBS.index("swims")]
    assert PLAUSIBLE[np.ix_(rows, columns)].tolist() == [[1, 0], [0, 1]]


def test_sentence_model_fits_every_sentence(sentence_model):
    ids, answers = sentence_data()
    probability = yes_probability(sentence_model, ids)
    assert torch.equal(probability > 0.5, answers == WORDS.index("yes"))


def test_sentence_training_is_reproducible():
    config = SentenceConfig(steps=3)
    assert train_sentence_model(config).losses == train_sentence_model(config).losses
    with pytest.raises(ValueError, match="steps must be a positive int"):
        train_sentence_model(SentenceConfig(steps=0))
    with pytest.raises(ValueError, match="num_heads=3 does not divide d_model=16"):
        train_sentence_model(SentenceConfig(num_heads=3))


def test_trace_records_what_the_ffn_reads_and_adds(sentence_model):
    ids, _ = sentence_data()
    trace = feed_forward_trace(sentence_model, ids)
    layer = sentence_model.encoder.layers[0]
    assert len(trace.inputs) == len(trace.updates) == len(trace.outputs) == 1
    assert trace.inputs[0].shape == trace.updates[0].shape == (16, 3, 16)
    assert trace.embeddings.shape == (16, 3, 16) and trace.attention[0].shape == (16, 2, 3, 3)
    with torch.no_grad():
        torch.testing.assert_close(trace.updates[0], layer.feed_forward(trace.inputs[0]))
        norm = layer.feed_forward_block.norm  # post-LN: output = LayerNorm(input + update)
        torch.testing.assert_close(trace.outputs[0], norm(trace.inputs[0] + trace.updates[0]))
    assert not layer.feed_forward._forward_hooks  # the hooks are gone afterwards


def test_skipping_the_ffn_keeps_only_attention_and_add_norm(sentence_model):
    ids, _ = sentence_data()
    trace = feed_forward_trace(sentence_model, ids)
    layer = sentence_model.encoder.layers[0]
    with torch.no_grad():
        hidden = layer.feed_forward_block.norm(trace.inputs[0])  # LayerNorm(input + 0)
        logits = sentence_model.head(hidden)[:, -1]  # (16, V)
    pair = logits[:, [WORDS.index("yes"), WORDS.index("no")]]
    expected = torch.softmax(pair, dim=-1)[:, 0]
    skipped = yes_probability(sentence_model, ids, skip_feed_forward=True)
    torch.testing.assert_close(skipped, expected)
    full = yes_probability(sentence_model, ids)
    assert not torch.equal(full, expected)
    assert torch.equal(yes_probability(sentence_model, ids), full)  # nothing left switched off
