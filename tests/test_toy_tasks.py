"""Tests for studies/toy_tasks.py: the task, the model, and that its heads specialise."""

import dataclasses

import numpy as np
import pytest
import torch

from transformer_tutorial.studies.toy_tasks import (
    IGNORE,
    TASKS,
    ToyConfig,
    ToyModel,
    attention_record,
    encode,
    head_task_weights,
    make_batch,
    targets_for,
    task_accuracy,
    train_toy_model,
)


@pytest.fixture(scope="module")
def four_heads():
    return train_toy_model(ToyConfig())


@pytest.fixture(scope="module")
def one_head():
    return train_toy_model(ToyConfig(num_heads=1))


def test_targets_by_hand():
    tokens = torch.tensor([[2, 0, 7, 1]])  # c a h b
    targets = targets_for(tokens)[0]  # (T, 4): previous, next, first, largest
    expected = [
        [IGNORE, 0, 2, 7],
        [2, 7, 2, 7],
        [0, 1, 2, 7],
        [7, IGNORE, 2, 7],
    ]
    assert targets.tolist() == expected
    assert TASKS == ("previous", "next", "first", "largest")


def test_batches_are_seeded():
    first = make_batch(8, 6, torch.Generator().manual_seed(0))
    second = make_batch(8, 6, torch.Generator().manual_seed(0))
    assert first.tokens.shape == (8, 6) and first.targets.shape == (8, 6, 4)
    assert torch.equal(first.tokens, second.tokens)
    assert 0 <= first.tokens.min() and first.tokens.max() < 26
    with pytest.raises(ValueError, match="length must be at least 2"):
        make_batch(8, 1, torch.Generator())


def test_encode():
    assert encode("Ab c", max_len=12).tolist() == [[0, 1, 2]]
    with pytest.raises(ValueError, match=r"only knows the letters a-z; got \['!', '1'\]"):
        encode("ab1!", max_len=12)
    with pytest.raises(ValueError, match="between 2 and 12 letters, got 13"):
        encode("abcdefghijklm", max_len=12)
    with pytest.raises(ValueError, match="got 1"):
        encode("a  ", max_len=12)


def test_config_and_model_reject_bad_input():
    with pytest.raises(ValueError, match="num_heads=3 does not divide d_model=64"):
        ToyConfig(num_heads=3)
    with pytest.raises(ValueError, match="min_len <= max_len"):
        ToyConfig(min_len=13)
    with pytest.raises(ValueError, match="steps must be positive"):
        ToyConfig(steps=0)
    model = ToyModel(ToyConfig())
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, T\) with 1 <= T <= 12"):
        model(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="got \\(5,\\)"):
        model(torch.zeros(5, dtype=torch.long))


def test_training_is_reproducible():
    config = ToyConfig(steps=5)
    threads = torch.get_num_threads()
    first, second = train_toy_model(config), train_toy_model(config)
    assert first.losses == second.losses  # bit for bit
    assert torch.get_num_threads() == threads  # trained on one thread, then restored
    other_seed = train_toy_model(dataclasses.replace(config, seed=1)).losses
    assert np.abs(np.subtract(first.losses, other_seed)).max() > 1e-2


def test_four_heads_learn_every_fact(four_heads):
    accuracy = task_accuracy(four_heads.model)
    assert min(accuracy.values()) > 0.95, accuracy
    assert four_heads.losses[0] > 3.0  # about ln 26 = 3.26: guessing among 26 letters
    assert four_heads.losses[-1] < 0.1


def test_each_fact_gets_its_own_head(four_heads):
    weights = head_task_weights(four_heads.model)  # (H, 4)
    assert weights.shape == (4, 4)
    specialist = weights.argmax(axis=0)  # the head that looks where each fact lives
    assert sorted(specialist.tolist()) == [0, 1, 2, 3], weights  # a different head per fact
    assert weights.max(axis=0).min() > 0.8, weights  # and it puts most of its weight there
    other = weights[~np.eye(4, dtype=bool)[np.argsort(specialist)]]
    assert other.max() < 0.3, weights  # off its own fact, a head looks only by chance


def test_one_head_cannot_do_it_with_the_same_parameters(four_heads, one_head):
    count = [sum(p.numel() for p in run.model.parameters()) for run in (four_heads, one_head)]
    assert count[0] == count[1]
    accuracy = task_accuracy(one_head.model)
    assert accuracy["previous"] < 0.7 and accuracy["next"] < 0.7, accuracy
    assert one_head.losses[-1] > 5 * four_heads.losses[-1]


def test_head_count_is_part_of_the_trained_model(four_heads):
    """The same weights read with two heads instead of four compute another function."""
    regrouped = ToyModel(dataclasses.replace(four_heads.model.config, num_heads=2))
    regrouped.load_state_dict(four_heads.model.state_dict())  # same shapes, so this loads
    accuracy = task_accuracy(regrouped.eval())
    assert sum(share < 0.7 for share in accuracy.values()) >= 2, accuracy  # four heads: > 0.95


def test_head_task_weights_of_an_untrained_model_are_near_uniform():
    weights = head_task_weights(ToyModel(ToyConfig()))
    assert weights.shape == (4, 4) and weights.max() < 0.5


def test_attention_record(four_heads):
    record = attention_record(four_heads.model, "Trans former")
    assert record.label == "Trans former"
    assert record.tokens == list("transformer")
    assert record.weights.shape == (1, 4, 11, 11)
    np.testing.assert_allclose(record.weights.sum(axis=-1), 1.0, atol=1e-6)
    assert attention_record(four_heads.model, "abc", label="x").label == "x"
    with pytest.raises(ValueError, match="only knows the letters"):
        attention_record(four_heads.model, "<b>x</b>")
