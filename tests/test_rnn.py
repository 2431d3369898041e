"""Tests for studies/recurrence.py: the recurrence, BPTT gradients, the recall task, Table 1."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from transformer_tutorial.model.attention import scaled_dot_product_attention
from transformer_tutorial.model.rnn import (
    RNNConfig,
    TanhRNN,
    orthogonal_recurrent_weight,
    rnn_step,
    torch_gru,
    torch_lstm,
    torch_rnn,
)
from transformer_tutorial.studies.recurrence import (
    AttentionClassifier,
    AttentionClassifierConfig,
    RecallTaskConfig,
    RecurrentClassifier,
    RecurrentClassifierConfig,
    TrainConfig,
    accuracy_by_distance,
    answer_gradient_norms,
    attention_layer_flops,
    conv_layer_flops,
    convolution_layers_needed,
    geometric_rate,
    graph_depth,
    hidden_state_jacobian_norms,
    jacobian_norms_by_length,
    layer_graph_depth,
    loop_vs_matrix_timings,
    measured_receptive_field,
    recall_batch,
    receptive_field,
    recurrent_layer_flops,
    step_jacobians,
    time_call,
    train_classifier,
)


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# The recurrence equals nn.RNN


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize(("batch", "length", "width", "hidden", "seed"), [
    (1, 1, 1, 1, 0),
    (3, 7, 4, 5, 1),
    (8, 30, 16, 32, 2),
])  # fmt: skip
def test_hand_written_rnn_equals_nn_rnn_with_copied_weights(
    nonlinearity, batch, length, width, hidden, seed
):
    config = RNNConfig(width, hidden, nonlinearity)
    torch.manual_seed(seed)
    reference = torch_rnn(config).double()
    ours = TanhRNN(config).double()
    ours.load_state_dict(reference.state_dict())  # same names, same shapes
    inputs = torch.randn(batch, length, width, generator=_generator(seed), dtype=torch.float64)
    h0 = torch.randn(batch, hidden, generator=_generator(seed + 10), dtype=torch.float64)
    for start in (None, h0):
        expected_outputs, expected_last = reference(
            inputs, None if start is None else start[None]
        )  # h0 as (1, B, D)
        outputs, last = ours(inputs, start)
        assert outputs.shape == (batch, length, hidden) and last.shape == (batch, hidden)
        torch.testing.assert_close(outputs, expected_outputs)
        torch.testing.assert_close(last, expected_last[0])


def test_one_step_written_out():
    x_t, h_prev = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5]])
    weight_ih, weight_hh = torch.tensor([[0.1, -0.2]]), torch.tensor([[2.0]])
    bias_ih, bias_hh = torch.tensor([0.3]), torch.tensor([-0.1])
    expected = math.tanh(0.1 * 1 - 0.2 * 2 + 0.3 + 2.0 * 0.5 - 0.1)
    got = rnn_step(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh)
    assert got.item() == pytest.approx(expected, abs=1e-7)


def test_step_is_rnn_step_with_the_layers_weights():
    rnn = TanhRNN(RNNConfig(3, 4), _generator(4))
    x_t, h_prev = (
        torch.randn(2, 3, generator=_generator(5)),
        torch.randn(2, 4, generator=_generator(6)),
    )
    expected = rnn_step(
        x_t, h_prev, rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0
    )
    assert torch.equal(rnn.step(x_t, h_prev), expected)
    assert torch.equal(rnn.hidden_states(x_t[:, None], h_prev)[1], expected)  # one step of T = 1


def test_initialisation_is_seeded_and_in_nn_rnn_range():
    config = RNNConfig(4, 9)
    first, second = TanhRNN(config, _generator(3)), TanhRNN(config, _generator(3))
    for (name, a), (_, b) in zip(first.named_parameters(), second.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
        assert a.abs().max() <= 1 / 3  # U(-1/sqrt(D), 1/sqrt(D)), D = 9
    assert {name for name, _ in first.named_parameters()} == set(torch_rnn(config).state_dict())


def test_lstm_wrapper_has_the_requested_sizes():
    lstm = torch_lstm(RNNConfig(5, 7))
    outputs, (h_n, c_n) = lstm(torch.zeros(2, 3, 5))
    assert outputs.shape == (2, 3, 7) and h_n.shape == c_n.shape == (1, 2, 7)


def test_gru_wrapper_has_the_requested_sizes():
    gru = torch_gru(RNNConfig(5, 7))
    outputs, h_n = gru(torch.zeros(2, 3, 5))
    assert isinstance(gru, nn.GRU) and gru.batch_first
    assert outputs.shape == (2, 3, 7) and h_n.shape == (1, 2, 7)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_size": 0, "hidden_size": 4}, "input_size must be a positive int"),
        ({"input_size": 2, "hidden_size": 2.5}, "hidden_size must be a positive int"),
        ({"input_size": 2, "hidden_size": 4, "nonlinearity": "sigmoid"}, "nonlinearity must be"),
    ],
)
def test_config_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RNNConfig(**kwargs)


def test_rnn_rejects_bad_input():
    rnn = TanhRNN(RNNConfig(3, 4))
    with pytest.raises(ValueError, match=r"inputs must have shape \(B, T, 3\), got \(2, 5\)"):
        rnn(torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"got \(2, 5, 4\)"):
        rnn(torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match="empty sequence"):
        rnn(torch.zeros(2, 0, 3))
    with pytest.raises(ValueError, match=r"h0 must have shape \(B, D\) = \(2, 4\)"):
        rnn(torch.zeros(2, 5, 3), torch.zeros(1, 2, 4))


# ---------------------------------------------------------------------------------------------
# Gradients through time decay or grow at the spectral radius


@pytest.mark.parametrize("radius", [0.3, 0.5, 0.7, 1.0, 1.2])
def test_orthogonal_weight_has_the_requested_spectral_radius(radius):
    weight = orthogonal_recurrent_weight(12, radius, _generator(1))
    eigenvalues = torch.linalg.eigvals(weight).abs()
    torch.testing.assert_close(eigenvalues, torch.full((12,), radius, dtype=torch.float64))
    singular = torch.linalg.svdvals(weight)
    torch.testing.assert_close(singular, torch.full((12,), radius, dtype=torch.float64))


def _rnn_with_radius(radius, hidden=16, width=4, seed=0):
    rnn = TanhRNN(RNNConfig(width, hidden), _generator(seed))
    with torch.no_grad():
        rnn.weight_hh_l0.copy_(orthogonal_recurrent_weight(hidden, radius, _generator(seed + 1)))
        rnn.bias_ih_l0.zero_()
        rnn.bias_hh_l0.zero_()
    return rnn


@pytest.mark.parametrize("radius", [0.5, 0.8, 0.95, 1.05, 1.2])
@pytest.mark.parametrize("seed", [0, 1])
def test_gradient_norms_change_geometrically_at_the_spectral_radius(radius, seed):
    # Small inputs keep tanh in its linear range (tanh' = 1 - h^2 close to 1), so
    # dh_T / dh_(T-k) = prod diag(1 - h^2) W_hh is almost exactly W_hh^k, of norm r^k.
    rnn = _rnn_with_radius(radius, seed=seed)
    inputs = 1e-4 * torch.randn(30, 4, generator=_generator(seed + 2))
    norms = hidden_state_jacobian_norms(rnn, inputs)
    assert norms.shape == (31,)
    assert norms[0] == pytest.approx(1.0)
    assert geometric_rate(norms) == pytest.approx(radius, rel=0.01)
    np.testing.assert_allclose(norms, radius ** np.arange(31), rtol=0.05)
    if radius < 1:
        assert np.all(np.diff(norms) < 0)  # vanishing
    else:
        assert np.all(np.diff(norms) > 0)  # exploding


def test_tanh_can_only_make_gradients_vanish_faster():
    # |tanh'| <= 1, so ||dh_T/dh_(T-k)|| <= ||W_hh||^k = r^k for any input
    for radius in (0.6, 0.9, 1.0):
        rnn = _rnn_with_radius(radius)
        inputs = torch.randn(40, 4, generator=_generator(5))  # ordinary inputs: tanh bends
        norms = hidden_state_jacobian_norms(rnn, inputs)
        assert np.all(norms <= radius ** np.arange(41) * (1 + 1e-9))
        assert geometric_rate(norms) < radius


def test_jacobian_norms_match_a_finite_difference():
    rnn = _rnn_with_radius(0.9, hidden=3, width=2)
    inputs = torch.randn(6, 2, generator=_generator(7), dtype=torch.float64)
    norms = hidden_state_jacobian_norms(rnn, inputs)
    rnn = rnn.double()
    states = rnn.hidden_states(inputs[None])  # the T + 1 states of one sequence
    # Jacobian of h_T with respect to h_3 by central differences over the last 3 steps
    step = 1e-6
    columns = []
    for j in range(3):
        shift = torch.zeros(1, 3, dtype=torch.float64)
        shift[0, j] = step
        plus = rnn(inputs[None, 3:], states[3] + shift)[1]
        minus = rnn(inputs[None, 3:], states[3] - shift)[1]
        columns.append((plus - minus)[0] / (2 * step))
    jacobian = torch.stack(columns, dim=1)  # (D, D)
    assert norms[3] == pytest.approx(torch.linalg.matrix_norm(jacobian, ord=2).item(), rel=1e-6)


def test_step_jacobians_are_diag_tanh_derivative_times_w_hh():
    rnn = _rnn_with_radius(0.9, hidden=5, width=3)
    inputs = torch.randn(8, 3, generator=_generator(8))
    factors = step_jacobians(rnn, inputs)
    assert factors.shape == (8, 5, 5) and factors.dtype == torch.float64
    states = rnn.double().hidden_states(inputs.double()[None])
    for t in range(1, 9):
        derivative = 1 - states[t][0] ** 2  # tanh'(a_t) = 1 - h_t^2
        expected = torch.diag(derivative) @ rnn.weight_hh_l0
        torch.testing.assert_close(factors[t - 1], expected.detach())


def test_norms_by_length_equal_backpropagation_through_the_whole_graph():
    rnn = _rnn_with_radius(1.1, hidden=8, width=4, seed=3)
    inputs = torch.randn(40, 4, generator=_generator(9))
    by_length = jacobian_norms_by_length(rnn, inputs, [1, 15, 40])
    assert sorted(by_length) == [1, 15, 40]
    for length, norms in by_length.items():
        expected = hidden_state_jacobian_norms(rnn, inputs[:length])
        np.testing.assert_allclose(norms, expected, rtol=1e-9)
    with pytest.raises(ValueError, match=r"lengths must be non-empty and in 1\.\.40"):
        jacobian_norms_by_length(rnn, inputs, [41])


def test_geometric_rate_recovers_a_known_rate():
    assert geometric_rate(3.0 * 0.7 ** np.arange(20)) == pytest.approx(0.7)
    assert geometric_rate(2.0 ** np.arange(10), start=0) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("norms", "start", "message"),
    [
        ([1.0, 0.5], 1, "need at least two norms"),
        ([[1.0, 0.5, 0.2]], 1, "must be 1-D"),
        ([1.0, 0.5, 0.0], 1, "positive and finite"),
        ([1.0, np.nan, 0.5], 1, "positive and finite"),
    ],
)
def test_geometric_rate_rejects_bad_input(norms, start, message):
    with pytest.raises(ValueError, match=message):
        geometric_rate(norms, start=start)


def test_jacobian_and_weight_reject_bad_input():
    rnn = TanhRNN(RNNConfig(3, 4))
    with pytest.raises(ValueError, match=r"one sequence of shape \(T, 3\)"):
        hidden_state_jacobian_norms(rnn, torch.zeros(1, 5, 3))
    with pytest.raises(ValueError, match="spectral_radius must be a positive number"):
        orthogonal_recurrent_weight(4, 0.0)
    with pytest.raises(ValueError, match="hidden_size must be a positive int"):
        orthogonal_recurrent_weight(0, 1.0)


# ---------------------------------------------------------------------------------------------
# The recall task generator


def test_recall_batch_puts_the_answer_n_positions_before_the_question():
    task = RecallTaskConfig(n_answers=5, n_fillers=7, length=20, max_distance=19)
    batch = recall_batch(task, 500, _generator(0))
    assert batch.tokens.shape == (500, 20) and batch.tokens.dtype == torch.int64
    assert task.question_token == 12
    assert torch.all(batch.tokens[:, -1] == 12)
    for row, target, distance in zip(batch.tokens, batch.targets, batch.distances, strict=True):
        answer_at = 19 - int(distance)
        assert row[answer_at] == target < 5
        answers = row < 5  # exactly one answer token; every other is a filler
        assert answers.sum() == 1 and answers[answer_at]
        others = torch.cat([row[:answer_at], row[answer_at + 1 : -1]])
        assert torch.all((others >= 5) & (others < 12))
    # every distance 1..19 and every answer occurs, roughly uniformly
    assert set(batch.distances.tolist()) == set(range(1, 20))
    assert set(batch.targets.tolist()) == set(range(5))


def test_recall_batch_can_fix_the_distance_and_is_seeded():
    task = RecallTaskConfig(length=12, max_distance=11)
    batch = recall_batch(task, 50, _generator(1), distance=11)
    assert torch.all(batch.distances == 11)
    assert torch.equal(batch.tokens[:, 0], batch.targets)  # 11 back from position 11 is 0
    again = recall_batch(task, 50, _generator(1), distance=11)
    assert torch.equal(batch.tokens, again.tokens)


def test_recall_fillers_carry_no_information():
    task = RecallTaskConfig(n_answers=2, n_fillers=3, length=6, max_distance=5)
    batch = recall_batch(task, 4000, _generator(2))
    before_question = batch.tokens[:, :-1]  # (B, T - 1)
    fillers = before_question[before_question >= 2]
    counts = torch.bincount(fillers - 2, minlength=3).double()
    assert torch.all((counts / counts.sum() - 1 / 3).abs() < 0.02)
    for target in (0, 1):  # filler frequencies do not depend on the answer
        rows = batch.tokens[batch.targets == target, :-1]
        share = (rows == 2).double().sum() / (rows >= 2).double().sum()
        assert share.item() == pytest.approx(1 / 3, abs=0.02)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"length": 1, "max_distance": 1}, "length must be at least 2"),
        ({"length": 10, "max_distance": 10}, r"max_distance <= length - 1 = 9"),
        ({"min_distance": 5, "max_distance": 4}, "min_distance <= max_distance"),
        ({"n_answers": 0}, "n_answers must be a positive int"),
    ],
)
def test_recall_task_rejects_bad_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RecallTaskConfig(**kwargs)


def test_recall_batch_rejects_bad_arguments():
    task = RecallTaskConfig(length=10, max_distance=9)
    with pytest.raises(ValueError, match=r"distance must be in 1\.\.9"):
        recall_batch(task, 4, _generator(), distance=10)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        recall_batch(task, 0, _generator())


# ---------------------------------------------------------------------------------------------
# The classifiers


TASK = RecallTaskConfig(n_answers=4, n_fillers=8, length=16, max_distance=15)


def test_attention_classifier_starts_with_uniform_attention():
    model = AttentionClassifier(AttentionClassifierConfig(TASK.vocab_size, 4, d_model=8), seed=1)
    tokens = recall_batch(TASK, 3, _generator(3)).tokens
    weights = model.attention_weights(tokens)
    torch.testing.assert_close(weights, torch.full((3, 16, 16), 1 / 16))


def test_attention_classifier_core_equals_the_numpy_attention():
    model = AttentionClassifier(AttentionClassifierConfig(TASK.vocab_size, 4, d_model=8), seed=1)
    with torch.no_grad():  # leave the uniform start: test the general case
        model.query.weight.normal_(generator=_generator(11))
        model.query.bias.normal_(generator=_generator(12))
    tokens = recall_batch(TASK, 3, _generator(3)).tokens
    queries, keys, values = (a.detach().double().numpy() for a in model._project(tokens))
    expected_out, expected_weights = scaled_dot_product_attention(queries, keys, values)
    weights = model.attention_weights(tokens).detach().double().numpy()
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6)
    logits = model(tokens).detach().double().numpy()
    classify = model.classify
    reference = expected_out[:, -1] @ classify.weight.detach().double().numpy().T
    reference += classify.bias.detach().double().numpy()
    np.testing.assert_allclose(logits, reference, rtol=1e-4, atol=1e-5)


def test_attention_output_at_the_question_depends_on_the_far_token():
    model = AttentionClassifier(AttentionClassifierConfig(TASK.vocab_size, 4, d_model=8), seed=2)
    batch = recall_batch(TASK, 1, _generator(4), distance=15)  # the answer is token 0
    changed = batch.tokens.clone()
    changed[0, 0] = (changed[0, 0] + 1) % TASK.n_answers
    assert not torch.allclose(model(batch.tokens), model(changed))
    # and one step away: the gradient of the output reaches position 0 directly
    embedded = model.positions(model.embedding(batch.tokens)).detach().requires_grad_(True)
    queries, keys, values = model.query(embedded), model.key(embedded), model.value(embedded)
    output = torch.nn.functional.scaled_dot_product_attention(queries, keys, values)[0, -1]
    (gradient,) = torch.autograd.grad(output.sum(), embedded)
    assert gradient[0, 0].abs().sum() > 0


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_recurrent_classifier_shapes_and_seeding(kind):
    config = RecurrentClassifierConfig(TASK.vocab_size, 4, hidden_size=8, kind=kind)
    state = torch.random.get_rng_state()
    first, second = RecurrentClassifier(config, seed=5), RecurrentClassifier(config, seed=5)
    assert torch.equal(state, torch.random.get_rng_state())  # global generator untouched
    tokens = recall_batch(TASK, 6, _generator(5)).tokens
    torch.testing.assert_close(first(tokens), second(tokens))
    assert first(tokens).shape == (6, 4)
    expected = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}[kind]
    assert isinstance(first.recurrent, expected)


def test_answer_gradient_norms_measure_the_gradient_at_the_answer_position():
    model = RecurrentClassifier(RecurrentClassifierConfig(TASK.vocab_size, 4, hidden_size=8))
    norms = answer_gradient_norms(model, TASK, [1, 5], 16, _generator(3))
    assert norms.shape == (2,) and np.all(norms > 0)
    # the same number by hand, for N = 5: autograd through the whole model, then one position
    generator = _generator(3)
    recall_batch(TASK, 16, generator, distance=1)  # the draw the N = 1 row used
    batch = recall_batch(TASK, 16, generator, distance=5)
    inputs = model.embedding(batch.tokens).detach().requires_grad_(True)
    outputs, _ = model.recurrent(inputs)
    loss = nn.functional.cross_entropy(
        model.classify(outputs[:, -1]), batch.targets, reduction="sum"
    )
    loss.backward()
    expected = inputs.grad[:, TASK.length - 1 - 5].norm(dim=-1).mean().item()
    assert norms[1] == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="distances is empty"):
        answer_gradient_norms(model, TASK, [], 4, _generator())


def test_models_reject_bad_tokens():
    attention = AttentionClassifier(AttentionClassifierConfig(TASK.vocab_size, 4, 8, max_len=10))
    recurrent = RecurrentClassifier(RecurrentClassifierConfig(TASK.vocab_size, 4))
    with pytest.raises(ValueError, match=r"int64 ids of shape \(B, T\)"):
        recurrent(torch.zeros(2, 3, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"token ids must be in 0\.\.12"):
        recurrent(torch.full((1, 3), 13))
    with pytest.raises(ValueError, match="longer than max_len=10"):
        attention(torch.zeros(1, 11, dtype=torch.int64))
    with pytest.raises(ValueError, match="kind must be 'rnn', 'lstm' or 'gru'"):
        RecurrentClassifierConfig(kind="transformer")


def test_training_learns_the_task_and_is_reproducible():
    task = RecallTaskConfig(n_answers=4, n_fillers=8, length=8, max_distance=7)
    train = TrainConfig(steps=120, batch_size=32, learning_rate=1e-2)
    results = []
    for _ in range(2):
        model = AttentionClassifier(AttentionClassifierConfig(task.vocab_size, 4, 16), seed=0)
        losses = train_classifier(model, task, train, _generator(0))
        accuracy = accuracy_by_distance(model, task, [1, 4, 7], 200, _generator(1))
        results.append((losses, accuracy))
    (losses, accuracy), (losses_again, accuracy_again) = results
    assert losses == losses_again and np.array_equal(accuracy, accuracy_again)
    assert len(losses) == 120 and np.mean(losses[-10:]) < 0.5 * losses[0]
    assert accuracy.shape == (3,) and accuracy.min() > 0.9  # chance is 0.25


def test_training_and_evaluation_reject_bad_arguments():
    with pytest.raises(ValueError, match="learning_rate must be positive"):
        TrainConfig(learning_rate=0.0)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        TrainConfig(steps=0)
    model = RecurrentClassifier(RecurrentClassifierConfig(TASK.vocab_size, 4))
    with pytest.raises(ValueError, match="distances is empty"):
        accuracy_by_distance(model, TASK, [], 10, _generator())
    with pytest.raises(ValueError, match="n_per_distance must be a positive int"):
        accuracy_by_distance(model, TASK, [1], 0, _generator())


# ---------------------------------------------------------------------------------------------
# Table 1: operation counts, sequential steps, receptive fields; timings


@pytest.mark.parametrize(("length", "width"), [(8, 4), (16, 32), (64, 64)])
def test_flop_counts_follow_table_1(length, width):
    n, d = length, width  # one multiply-add = 2 FLOPs
    core = 2 * 2 * n * n * d  # Q K^T and weights @ V: Table 1's O(n^2 d)
    assert attention_layer_flops(n, d, projections=False) == core
    assert attention_layer_flops(n, d) == core + 2 * 4 * n * d * d  # + W_Q, W_K, W_V, W_O
    assert recurrent_layer_flops(n, d) == n * 2 * 2 * d * d  # two D x D products per step: O(n d^2)
    assert recurrent_layer_flops(n, d, "gru") == n * 2 * 6 * d * d  # three gates, two each
    assert recurrent_layer_flops(n, d, "lstm") == n * 2 * 8 * d * d  # four gates, two each
    assert conv_layer_flops(n, d, 3) == 2 * 3 * n * d * d  # O(k n d^2)


def test_sequential_depth_grows_with_length_only_for_the_recurrent_layer():
    for kind in ("self-attention", "convolutional"):
        depths = {layer_graph_depth(kind, n) for n in (4, 16, 64)}
        assert len(depths) == 1, f"{kind}: depth should not depend on the length"
    recurrent = [layer_graph_depth("recurrent", n) for n in (4, 16, 64)]
    per_step = (recurrent[1] - recurrent[0]) / 12
    assert per_step >= 1 and recurrent[2] - recurrent[1] == per_step * 48  # linear in n
    with pytest.raises(ValueError, match="kind must be"):
        layer_graph_depth("transformer", 4)


def test_graph_depth_counts_the_longest_chain():
    start = torch.ones(3, requires_grad=True)
    chain = start
    for _ in range(5):
        chain = chain * 2  # five operations in a row
    assert graph_depth(chain) == 6  # plus the leaf's AccumulateGrad
    assert graph_depth(chain + start * 3) == 7  # the longer branch decides
    with pytest.raises(ValueError, match="no autograd graph"):
        graph_depth(torch.ones(2))


def test_which_layer_does_less_arithmetic_depends_on_what_is_counted():
    d = 64
    # Table 1's core alone against a whole tanh RNN layer: below it exactly while n < d
    assert attention_layer_flops(16, d, projections=False) < recurrent_layer_flops(16, d)
    assert attention_layer_flops(64, d, projections=False) == recurrent_layer_flops(64, d)
    assert attention_layer_flops(256, d, projections=False) > recurrent_layer_flops(256, d)
    # whole layers: self-attention costs more than the tanh RNN at every length ...
    for n in (1, 16, 64, 256):
        assert attention_layer_flops(n, d) > recurrent_layer_flops(n, d)
    # ... and less than an LSTM exactly while n < 2d (8 n d^2 + 4 n^2 d against 16 n d^2)
    assert attention_layer_flops(64, d) < recurrent_layer_flops(64, d, "lstm")
    assert attention_layer_flops(128, d) == recurrent_layer_flops(128, d, "lstm")
    assert attention_layer_flops(256, d) > recurrent_layer_flops(256, d, "lstm")


@pytest.mark.parametrize(
    ("kernel_size", "layers", "growth", "expected"),
    [(2, 1, 1, 2), (3, 1, 1, 3), (3, 4, 1, 9), (5, 3, 1, 13), (2, 5, 2, 32), (3, 3, 3, 27)],
)
def test_receptive_field_formula_and_measurement_agree(kernel_size, layers, growth, expected):
    assert receptive_field(kernel_size, layers, growth) == expected
    assert measured_receptive_field(kernel_size, layers, growth, length=64) == expected


def test_layers_needed_grow_linearly_without_dilation_and_logarithmically_with_it():
    assert [convolution_layers_needed(n, 3) for n in (3, 9, 10, 100)] == [1, 4, 5, 50]
    assert [convolution_layers_needed(n, 3, 3) for n in (3, 9, 10, 100, 1000)] == [1, 2, 3, 5, 7]
    for n in (10, 100, 1000):
        assert convolution_layers_needed(n, 3, 3) == math.ceil(math.log(n, 3))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: receptive_field(1, 3), "kernel_size must be at least 2"),
        (lambda: receptive_field(3, 0), "layers must be a positive int"),
        (lambda: measured_receptive_field(3, 10, length=8), r"receptive field \(21\) is wider"),
        (lambda: convolution_layers_needed(0, 3), "span must be a positive int"),
        (lambda: attention_layer_flops(0, 4), "length must be a positive int"),
        (lambda: conv_layer_flops(4, 4, 0), "kernel_size must be a positive int"),
        (lambda: recurrent_layer_flops(4, 4, "rnm"), "kind must be 'rnn', 'gru' or 'lstm'"),
        (lambda: loop_vs_matrix_timings([]), "lengths is empty"),
        (lambda: loop_vs_matrix_timings([4, 0]), "each length must be a positive int"),
        (lambda: time_call(lambda: None, repeats=0), "repeats must be a positive int"),
    ],
)
def test_table_helpers_reject_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_time_call_measures_the_median():
    calls = []
    seconds = time_call(lambda: calls.append(1), repeats=3)
    assert len(calls) == 4 and 0 <= seconds < 0.1  # one warm-up call, three timed


def test_loop_vs_matrix_timings_report_every_length():
    result = loop_vs_matrix_timings([4, 32], width=8, batch_size=2, repeats=1)
    assert result.lengths.tolist() == [4, 32]
    assert result.loop_seconds.shape == result.matrix_seconds.shape == (2,)
    assert np.all(result.loop_seconds > 0) and np.all(result.matrix_seconds > 0)
    np.testing.assert_allclose(result.ratio, result.loop_seconds / result.matrix_seconds)
