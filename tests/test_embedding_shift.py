"""Tests for transformer_tutorial.studies.embedding_shift: the toy attention models, measured."""

import numpy as np
import pytest
import torch

from transformer_tutorial.model.attention import scaled_dot_product_attention
from transformer_tutorial.studies.embedding_shift import (
    ANCHORS,
    APPLE_PRESETS,
    APPLE_VOCABULARY,
    IGNORE,
    RELATION_PRESETS,
    RELATIONS_VOCABULARY,
    TOPICS,
    UNK,
    Example,
    ToyAttentionModel,
    ToyConfig,
    apple_config,
    apple_corpus,
    attention_scores,
    attention_weights,
    count_correct,
    diagonal_share,
    encode,
    favours_self,
    measure_shift,
    relations_config,
    relations_corpus,
    run,
    tokenize,
    train_toy_model,
    unseen,
)


def _train_apple_model():
    """The apple model with the chapter's settings."""
    return train_toy_model(
        apple_config(),
        apple_corpus(600, seed=1),
        steps=120,
        learning_rate=0.03,
        weight_decay=0.1,
        seed=0,
    )


@pytest.fixture(scope="module")
def apple_model():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the chapter, after set_seed
    model, losses = _train_apple_model()
    torch.set_num_threads(threads)
    return model, losses


def test_tokenize_and_encode():
    assert tokenize("  The Apple  app ") == ["the", "apple", "app"]
    assert encode(["apple", "<b>x</b>"], APPLE_VOCABULARY) == [
        APPLE_VOCABULARY.index("apple"),
        APPLE_VOCABULARY.index(UNK),
    ]
    with pytest.raises(ValueError, match="no words"):
        tokenize("   ")


def test_corpora_are_seeded_and_well_formed():
    assert [e.words for e in apple_corpus(20, seed=3)] == [
        e.words for e in apple_corpus(20, seed=3)
    ]
    for example in apple_corpus(200, seed=0):
        assert len(set(example.targets)) == 1 and example.targets[0] in range(len(TOPICS))
        assert set(example.words) <= set(APPLE_VOCABULARY)
    for example in relations_corpus(200, seed=0):
        assert set(example.words) <= set(RELATIONS_VOCABULARY)
        for word, target in zip(example.words, example.targets, strict=True):
            if word == "it":
                referent = RELATIONS_VOCABULARY[target]
                assert referent in example.words
                animate = example.words[-1] in ("tired", "hungry", "sleepy", "scared")
                assert referent == (example.words[1] if animate else example.words[5])
            elif target != IGNORE:
                assert RELATIONS_VOCABULARY[target] in example.words


@pytest.mark.parametrize("value_projection", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_layer_is_the_residual_plus_the_tested_numpy_attention(value_projection, seed):
    heads = 2 if value_projection else 1
    config = ToyConfig(
        APPLE_VOCABULARY, n_outputs=3, d_model=4, n_heads=heads, value_projection=value_projection
    )
    model = ToyAttentionModel(config, torch.Generator().manual_seed(seed))
    words, output = run(model, "i like the sweet apple")
    x = output.states[0][0].numpy().astype(float)  # (T, D)
    layer = model.layers[0]

    def linear(module, inputs):
        return inputs @ module.weight.detach().numpy().T + module.bias.detach().numpy()

    def split(array):
        return array.reshape(len(words), heads, -1).transpose(1, 0, 2)  # (T, D) -> (H, T, K)

    values = x if layer.W_V is None else linear(layer.W_V, x)
    mixed, weights = scaled_dot_product_attention(
        split(linear(layer.W_Q, x)), split(linear(layer.W_K, x)), split(values)
    )
    mixed = mixed.transpose(1, 0, 2).reshape(len(words), -1)  # (H, T, K) -> (T, D)
    if layer.W_O is not None:
        mixed = linear(layer.W_O, mixed)
    np.testing.assert_allclose(output.states[1][0].numpy(), x + mixed, atol=1e-5)
    np.testing.assert_allclose(output.weights[0, 0].numpy(), weights, atol=1e-6)


def test_padding_is_never_attended_and_does_not_change_real_tokens():
    model = ToyAttentionModel(relations_config())
    ids = torch.tensor([encode(tokenize("i want to eat pizza"), RELATIONS_VOCABULARY)])
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)  # 3 x [PAD]
    with torch.no_grad():
        plain, with_pad = model(ids), model(padded)
    assert with_pad.weights[..., 5:].abs().max() == 0
    torch.testing.assert_close(with_pad.logits[:, :5], plain.logits)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vocabulary": ("a", "b")}, "must start with"),
        ({"d_model": 3, "n_heads": 2, "value_projection": True}, "must divide d_model"),
        ({"n_heads": 2, "d_model": 4}, "use n_heads=1"),
        ({"initial_points": {"nope": (0.0, 0.0)}}, "initial_points"),
        ({"initial_points": {"apple": (0.0,)}}, "initial_points"),
        ({"d_model": 0}, "must be positive"),
    ],
)
def test_config_errors(kwargs, message):
    arguments = {"vocabulary": APPLE_VOCABULARY, "n_outputs": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        ToyConfig(**arguments)


def test_model_input_errors():
    model = ToyAttentionModel(relations_config())
    with pytest.raises(ValueError, match=r"shape \(B, T\)"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="longer than the position table"):
        model(torch.ones(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="examples is empty"):
        train_toy_model(relations_config(), [], steps=1, learning_rate=0.1)


def test_apple_model_starts_from_the_reference_picture():
    model = ToyAttentionModel(apple_config())
    table = model.embedding.weight.detach().numpy()
    apple, mac = table[APPLE_VOCABULARY.index("apple")], table[APPLE_VOCABULARY.index("mac")]
    np.testing.assert_allclose(apple, [0.0, 0.0])  # centred on the reference apple (4.5, 4.5)
    np.testing.assert_allclose(mac, [(6.0 - 4.5) / 3, (8.0 - 4.5) / 3], rtol=1e-6)


def test_training_is_reproducible(apple_model):
    _, losses = apple_model
    _, again = _train_apple_model()
    assert losses == again
    assert losses[-1] < 0.05 < losses[0]


def test_apple_moves_toward_the_cluster_its_context_names(apple_model):
    model, _ = apple_model
    for label, sentence in APPLE_PRESETS.items():
        shift = measure_shift(model, sentence)
        np.testing.assert_allclose(shift.attention.sum(), 1, atol=1e-6)
        if label.startswith("fruit"):
            assert shift.after["fruit"] < 0.6 * shift.before["fruit"]
            assert shift.after["technology"] > shift.before["technology"]
        elif label.startswith("technology"):
            assert shift.after["technology"] < 0.6 * shift.before["technology"]
            assert shift.after["fruit"] > shift.before["fruit"]
    neutral = measure_shift(model, "i bought this apple")
    assert neutral.after["fruit"] > neutral.before["fruit"]
    assert neutral.after["technology"] > neutral.before["technology"]


def test_measure_shift_needs_the_word(apple_model):
    with pytest.raises(ValueError, match="'apple' is not in the sentence"):
        measure_shift(apple_model[0], "i like juice")
    shift = measure_shift(apple_model[0], "apple juice", anchors=ANCHORS)
    assert shift.trajectory.shape == (2, 2) and shift.position == 0


@pytest.fixture
def one_thread():
    """Train as the chapter does after ``set_seed``: one thread, so sums run in one order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_relations_model_resolves_it_and_finds_objects(one_thread):
    model, losses = train_toy_model(
        relations_config(),
        relations_corpus(400, seed=2),
        steps=60,
        learning_rate=0.02,
        weight_decay=0.01,
        seed=0,
    )
    assert losses[-1] < 0.05
    for label, sentence in RELATION_PRESETS.items():
        answer = label.split(":")[0].split(" -> ")
        words, output = run(model, sentence)
        predicted = RELATIONS_VOCABULARY[int(output.logits[0, words.index(answer[0])].argmax())]
        assert predicted == answer[1], f"{sentence}: {answer[0]} -> {predicted}"
        _, weights = attention_weights(model, sentence)
        assert weights.shape == (2, 2, len(words), len(words))
        np.testing.assert_allclose(weights.sum(axis=-1), 1, atol=1e-6)
        _, scores = attention_scores(model, sentence)  # before the softmax
        assert scores.shape == weights.shape
        exps = np.exp(scores - scores.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(exps / exps.sum(axis=-1, keepdims=True), weights, atol=1e-6)
        assert not np.allclose(scores, np.swapaxes(scores, -1, -2))  # W_Q != W_K: asymmetric
    held_out = unseen(relations_corpus(200, seed=3), relations_corpus(400, seed=2))
    right, total = count_correct(model, held_out)
    assert total == sum(target != IGNORE for example in held_out for target in example.targets)
    assert right >= 0.95 * total


def test_unseen_keeps_only_sentences_absent_from_training():
    training, candidates = relations_corpus(400, seed=2), relations_corpus(200, seed=3)
    held_out = unseen(candidates, training)
    seen = {tuple(example.words) for example in training}
    assert held_out, "some test sentences are new"
    assert not {tuple(example.words) for example in held_out} & seen  # disjoint from training
    assert len({tuple(example.words) for example in held_out}) == len(held_out)  # no repeats
    fresh = {tuple(example.words) for example in candidates} - seen
    assert {tuple(example.words) for example in held_out} == fresh  # every new one is kept
    assert any(tuple(example.words) in seen for example in candidates)  # the filter matters
    assert unseen([], training) == []


def test_scores_are_the_weights_before_the_softmax():
    model = ToyAttentionModel(apple_config())
    words, scores = attention_scores(model, "i like apple juice")
    _, weights = attention_weights(model, "i like apple juice")
    assert scores.shape == weights.shape == (1, 1, 4, 4)
    layer = model.layers[0]
    with torch.no_grad():
        x = model.embedding(torch.tensor([encode(words, APPLE_VOCABULARY)]))[0]  # (T, D)
        expected = layer.W_Q(x) @ layer.W_K(x).T / 2**0.5  # d_k = D = 2
    np.testing.assert_allclose(scores[0, 0], expected.numpy(), rtol=1e-6)
    np.testing.assert_allclose(torch.tensor(scores).softmax(-1).numpy(), weights, atol=1e-6)


def test_count_correct_counts_only_words_with_a_target():
    model = ToyAttentionModel(apple_config())
    words, output = run(model, "i like apple juice")
    guesses = output.logits[0].argmax(dim=-1).tolist()  # (T,)
    targets = [guesses[0], (guesses[1] + 1) % len(TOPICS), IGNORE, guesses[3]]
    assert count_correct(model, [Example(words, targets)]) == (2, 3)


def test_diagonal_share():
    assert diagonal_share(np.eye(3)) == 1.0
    assert diagonal_share(np.full((4, 4), 0.25)) == 0.0  # ties do not count
    weights = np.array([[0.6, 0.4], [0.9, 0.1]])
    assert diagonal_share(weights) == 0.5
    assert diagonal_share(np.stack([weights, np.eye(2)])) == 0.75
    with pytest.raises(ValueError, match=r"shape \(..., T, T\)"):
        diagonal_share(np.ones((2, 3)))


def test_favours_self_answers_row_by_row():
    weights = np.array([[[0.6, 0.4], [0.9, 0.1]], [[0.5, 0.5], [0.2, 0.8]]])  # (2, T=2, T=2)
    np.testing.assert_array_equal(favours_self(weights), [[True, False], [False, True]])
    assert favours_self(np.array([[1.0]])).tolist() == [True]  # one token: nothing else to favour
    with pytest.raises(ValueError, match=r"shape \(..., T, T\)"):
        favours_self(np.ones((0, 0)))
