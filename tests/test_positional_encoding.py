"""Tests for transformer_tutorial.model.positions (paper section 3.5) and
transformer_tutorial.studies.position_geometry (what chapter 3 proves about the table)."""

import math

import numpy as np
import pytest
import torch

from transformer_tutorial.model.positions import (
    LearnedPositionalEmbedding,
    PositionalConfig,
    SinusoidalPositionalEncoding,
    frequencies,
    sinusoidal_encoding,
)
from transformer_tutorial.studies.position_geometry import (
    concatenated_to_interleaved,
    rotation_matrix,
    similarity_by_distance,
    sinusoidal_encoding_concatenated,
    tensor2tensor_encoding,
)

SIZES = [(1, 2), (7, 4), (50, 16), (128, 64), (100, 512)]


def test_values_at_hand_computed_points():
    table = sinusoidal_encoding(100, 512)
    # position 0: every sine is 0 and every cosine is 1
    np.testing.assert_array_equal(table[0, 0::2], 0.0)
    np.testing.assert_array_equal(table[0, 1::2], 1.0)
    # pair 0 has frequency 1: PE(1, 0) = sin(1), PE(1, 1) = cos(1)
    assert table[1, 0] == pytest.approx(0.8414709848078965, abs=1e-15)
    assert table[1, 1] == pytest.approx(0.5403023058681398, abs=1e-15)
    # pair i = 1 of d_model = 512: angle = 3 / 10000^(2/512)
    angle = 3 / 10000 ** (2 / 512)
    assert table[3, 2] == pytest.approx(math.sin(angle), abs=1e-15)
    assert table[3, 3] == pytest.approx(math.cos(angle), abs=1e-15)
    # the last pair (i = 255): angle = pos / 10000^(510/512), tiny
    angle = 99 / 10000 ** (510 / 512)
    assert table[99, 510] == pytest.approx(math.sin(angle), abs=1e-15)
    assert table[99, 511] == pytest.approx(math.cos(angle), abs=1e-15)


def test_small_table_written_out():
    # d_model = 4: frequencies 1 and 1/100
    expected = np.array(
        [[math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)] for p in range(3)]
    )
    np.testing.assert_allclose(sinusoidal_encoding(3, 4), expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize(("max_len", "d_model"), SIZES)
def test_even_dimensions_take_sine_odd_take_cosine(max_len, d_model):
    table = sinusoidal_encoding(max_len, d_model)
    angles = np.arange(max_len)[:, None] * frequencies(d_model)[None, :]
    np.testing.assert_allclose(table[:, 0::2], np.sin(angles), atol=1e-15)
    np.testing.assert_allclose(table[:, 1::2], np.cos(angles), atol=1e-15)
    # and not the other way round: at position 0 the even dimensions are 0, not 1
    assert np.all(table[0, 0::2] == 0) and np.all(table[0, 1::2] == 1)


def test_frequencies_span_one_to_one_over_base():
    omega = frequencies(512)
    assert omega.shape == (256,)
    assert omega[0] == 1.0
    assert omega[-1] == pytest.approx(10000 ** (-510 / 512))
    assert np.all(np.diff(omega) < 0)
    # wavelengths 2*pi / omega run from 2*pi to almost 2*pi*10000 (paper section 3.5)
    assert 2 * np.pi / omega[-1] == pytest.approx(2 * np.pi * 10000 ** (510 / 512))


@pytest.mark.parametrize(("max_len", "d_model"), [(50, 16), (512, 64), (1000, 512)])
def test_every_position_has_a_unique_vector(max_len, d_model):
    table = sinusoidal_encoding(max_len, d_model)
    gaps = np.linalg.norm(table[:, None, :] - table[None, :, :], axis=-1)  # (L, L)
    np.fill_diagonal(gaps, np.inf)
    assert gaps.min() > 1e-3


def test_every_vector_has_the_same_length():
    table = sinusoidal_encoding(200, 64)
    np.testing.assert_allclose(np.linalg.norm(table, axis=1), math.sqrt(32), rtol=1e-12)


@pytest.mark.parametrize(("max_len", "d_model"), [(64, 16), (100, 64), (60, 512)])
def test_dot_product_depends_only_on_distance(max_len, d_model):
    table = sinusoidal_encoding(max_len, d_model)
    gram = table @ table.T  # (L, L)
    distance = np.arange(max_len)[:, None] - np.arange(max_len)[None, :]
    np.testing.assert_allclose(gram, similarity_by_distance(distance, d_model), rtol=0, atol=1e-9)
    # every diagonal of the Gram matrix is constant
    for offset in range(-max_len + 1, max_len):
        diagonal = np.diagonal(gram, offset)
        assert np.ptp(diagonal) < 1e-9
    # symmetric in the distance, and d_model / 2 at distance 0
    np.testing.assert_allclose(np.diag(gram), d_model / 2, atol=1e-9)
    np.testing.assert_allclose(gram, gram.T, atol=1e-12)


@pytest.mark.parametrize("shift", [1, 3, 17])
@pytest.mark.parametrize("d_model", [2, 16, 128])
def test_shift_is_a_fixed_block_rotation(shift, d_model):
    table = sinusoidal_encoding(100, d_model)
    matrix = rotation_matrix(shift, d_model)
    # one matrix serves every position
    np.testing.assert_allclose(table[shift:], table[:-shift] @ matrix.T, atol=1e-9)
    # it is a rotation: orthogonal with determinant 1, built from 2x2 blocks
    np.testing.assert_allclose(matrix @ matrix.T, np.eye(d_model), atol=1e-12)
    assert np.linalg.det(matrix) == pytest.approx(1.0)
    outside_blocks = matrix.copy()
    for pair in range(d_model // 2):
        outside_blocks[2 * pair : 2 * pair + 2, 2 * pair : 2 * pair + 2] = 0
    assert not outside_blocks.any()
    # shifts compose: M_a M_b = M_(a+b)
    np.testing.assert_allclose(
        rotation_matrix(shift, d_model) @ rotation_matrix(5, d_model),
        rotation_matrix(shift + 5, d_model),
        atol=1e-12,
    )


@pytest.mark.parametrize(("max_len", "d_model"), SIZES)
def test_concatenated_variant_is_a_permutation_of_the_paper(max_len, d_model):
    interleaved = sinusoidal_encoding(max_len, d_model)
    concatenated = sinusoidal_encoding_concatenated(max_len, d_model)
    order = concatenated_to_interleaved(d_model)
    assert sorted(order) == list(range(d_model))
    np.testing.assert_array_equal(concatenated[:, order], interleaved)
    # same numbers, so the same dot products between positions
    np.testing.assert_allclose(
        concatenated @ concatenated.T, interleaved @ interleaved.T, atol=1e-9
    )
    if d_model > 2:
        assert not np.array_equal(concatenated, interleaved)


def test_tensor2tensor_table_at_hand_computed_points():
    # d_model = 8: four frequencies 10000^(-i/3), i = 0..3, from 1 down to 1/10000 inclusive
    table = tensor2tensor_encoding(10, 8)
    omega = [1.0, 10000 ** (-1 / 3), 10000 ** (-2 / 3), 1e-4]
    for pos in (0, 1, 7):
        expected = [math.sin(pos * w) for w in omega] + [math.cos(pos * w) for w in omega]
        np.testing.assert_allclose(table[pos], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("d_model", [4, 16, 128])
def test_tensor2tensor_table_is_not_a_reordering_of_the_paper(d_model):
    t2t = tensor2tensor_encoding(50, d_model)
    paper = sinusoidal_encoding_concatenated(50, d_model)
    # pair 0 (frequency 1) is the same in both
    np.testing.assert_allclose(t2t[:, [0, d_model // 2]], paper[:, [0, d_model // 2]])
    # a reordering of columns keeps each row's numbers; row 1 holds sin and cos of each frequency
    assert not np.allclose(np.sort(t2t[1]), np.sort(paper[1]), rtol=0, atol=1e-9)
    # the frequencies differ from pair 1 on: t2t's reach 1/10000, the paper's stop short of it
    t2t_omega = np.arcsin(t2t[1, : d_model // 2])  # sin(omega_i), omega_i <= 1 < pi/2
    np.testing.assert_allclose(t2t_omega[-1], 1e-4)
    assert np.all(t2t_omega[1:] < frequencies(d_model)[1:])
    # still sines and cosines of one angle per pair: dot products depend only on distance
    gram = t2t @ t2t.T
    for k in range(1, 50):
        diagonal = np.diag(gram, k)
        np.testing.assert_allclose(diagonal, diagonal[0], atol=1e-9)


def test_tensor2tensor_table_matches_the_paper_when_there_is_one_pair():
    np.testing.assert_allclose(tensor2tensor_encoding(9, 2), sinusoidal_encoding(9, 2))


def test_tensor2tensor_table_rejects_bad_sizes():
    with pytest.raises(ValueError, match="max_len"):
        tensor2tensor_encoding(0, 8)
    with pytest.raises(ValueError, match="even"):
        tensor2tensor_encoding(5, 7)


def test_torch_module_adds_the_table():
    config = PositionalConfig(d_model=16, max_len=32)
    module = SinusoidalPositionalEncoding(config)
    embeddings = torch.randn(3, 10, 16, generator=torch.Generator().manual_seed(0))
    out = module(embeddings)
    assert out.shape == (3, 10, 16)
    expected = embeddings + torch.tensor(sinusoidal_encoding(10, 16), dtype=torch.float32)
    torch.testing.assert_close(out, expected)
    assert list(module.parameters()) == []  # fixed, not learned
    assert "table" not in module.state_dict()  # recomputed, not stored


def test_torch_module_keeps_dtype():
    module = SinusoidalPositionalEncoding(PositionalConfig(d_model=8, max_len=4))
    out = module(torch.zeros(1, 4, 8, dtype=torch.float64))
    assert out.dtype == torch.float64
    np.testing.assert_allclose(out[0].numpy(), sinusoidal_encoding(4, 8), atol=1e-6)


def test_learned_module_is_trainable_and_seeded():
    config = PositionalConfig(d_model=8, max_len=20)
    first = LearnedPositionalEmbedding(config, generator=torch.Generator().manual_seed(1))
    again = LearnedPositionalEmbedding(config, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(first.embedding.weight, again.embedding.weight)
    assert first.embedding.weight.std().item() == pytest.approx(0.02, rel=0.3)
    x = torch.zeros(2, 5, 8)
    out = first(x)
    torch.testing.assert_close(out[0], first.embedding.weight[:5])
    out.sum().backward()
    grad = first.embedding.weight.grad
    assert grad[:5].abs().sum() > 0 and grad[5:].abs().sum() == 0  # only used rows learn


@pytest.mark.parametrize(
    ("max_len", "d_model", "message"),
    [
        (10, 7, "d_model must be even"),
        (10, 0, "d_model must be a positive int"),
        (0, 8, "max_len must be a positive int"),
        (-3, 8, "max_len must be a positive int"),
        (2.5, 8, "max_len must be a positive int"),
    ],
)
def test_bad_sizes_raise(max_len, d_model, message):
    with pytest.raises(ValueError, match=message):
        sinusoidal_encoding(max_len, d_model)
    with pytest.raises(ValueError, match=message):
        sinusoidal_encoding_concatenated(max_len, d_model)


def test_bad_base_raises():
    with pytest.raises(ValueError, match="base must be greater than 1"):
        frequencies(8, base=1.0)


@pytest.mark.parametrize("module_class", [SinusoidalPositionalEncoding, LearnedPositionalEmbedding])
def test_modules_reject_bad_input(module_class):
    module = module_class(PositionalConfig(d_model=8, max_len=6))
    with pytest.raises(ValueError, match=r"longer than the position table \(max_len=6\)"):
        module(torch.zeros(1, 7, 8))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 8\)"):
        module(torch.zeros(1, 3, 6))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, D\), got \(3, 8\)"):
        module(torch.zeros(3, 8))
    with pytest.raises(ValueError, match="empty sequence"):
        module(torch.zeros(2, 0, 8))


def test_module_rejects_odd_d_model():
    with pytest.raises(ValueError, match="d_model must be even"):
        SinusoidalPositionalEncoding(PositionalConfig(d_model=5, max_len=6))
