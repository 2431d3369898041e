"""Tests for transformer_tutorial.set_seed."""

import random

import numpy as np
import pytest
import torch

from transformer_tutorial import set_seed


def _draw(rng: np.random.Generator):
    return random.random(), np.random.rand(), torch.rand(1).item(), rng.random()  # noqa: NPY002


def test_same_seed_same_numbers_everywhere():
    first = _draw(set_seed(7))
    second = _draw(set_seed(7))
    assert first == second
    assert _draw(set_seed(8)) != first


def test_single_threaded():
    set_seed(0)
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, None])
def test_bad_seed_raises(bad):
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        set_seed(bad)
