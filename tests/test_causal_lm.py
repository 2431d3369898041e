"""Tests for studies/causal_lm.py: the tiny language model and the model that cheats."""

import dataclasses
import math

import pytest
import torch

from transformer_tutorial.model.transformer import DecoderOnly, build_model
from transformer_tutorial.studies.causal_lm import (
    HELD_OUT_TEXT,
    PAD_TOKEN,
    TRAINING_TEXT,
    VOCABULARY,
    CausalLMConfig,
    CharVocabulary,
    evaluate,
    generate_text,
    known_ngram_fraction,
    next_character_entropy,
    next_token_loss,
    prefix_by_prefix_logits,
    train_char_lm,
    training_windows,
)


@pytest.fixture(scope="module")
def trained():
    """The chapter's experiment: the same config trained with and without the causal mask."""
    config = CausalLMConfig()
    return config, train_char_lm(config, causal=True), train_char_lm(config, causal=False)


def _untrained(num_layers=2, seed=0):
    config = CausalLMConfig(num_layers=num_layers).transformer_config(len(VOCABULARY))
    return build_model(config, torch.Generator().manual_seed(seed)).eval()


def test_corpus_is_small_and_the_held_out_sentences_are_new():
    assert 300 <= len(TRAINING_TEXT) <= 600 and 50 <= len(HELD_OUT_TEXT) <= 150
    training = {sentence.strip() for sentence in TRAINING_TEXT.split(".")}
    held_out = {sentence.strip() for sentence in HELD_OUT_TEXT.split(".")} - {""}
    assert held_out and not held_out & training  # new combinations only
    held_words = set(HELD_OUT_TEXT.replace(".", " ").split())
    assert held_words <= set(TRAINING_TEXT.replace(".", " ").split())  # ... of known words


def test_vocabulary_round_trip_and_errors():
    assert VOCABULARY.tokens[0] == PAD_TOKEN and VOCABULARY.pad_id == 0
    assert len(VOCABULARY) == 1 + len(set(TRAINING_TEXT + HELD_OUT_TEXT))
    ids = VOCABULARY.encode("the cat.")
    assert ids.dtype == torch.long and ids.shape == (8,) and (ids > 0).all()
    assert VOCABULARY.decode(ids) == "the cat."
    assert VOCABULARY.decode([0, *ids[:3].tolist()]) == "[PAD]the"
    with pytest.raises(ValueError, match=r"outside the vocabulary: \['!', 'Z'\]"):
        VOCABULARY.encode("Zoo!")
    with pytest.raises(ValueError, match=r"ids must have shape \(T,\)"):
        VOCABULARY.decode(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="must start with"):
        CharVocabulary(("a", "b"))
    with pytest.raises(ValueError, match="distinct single characters"):
        CharVocabulary((PAD_TOKEN, "a", "a"))
    with pytest.raises(ValueError, match="texts are empty"):
        CharVocabulary.from_text("")
    assert CharVocabulary.from_text("ba", "c").tokens == (PAD_TOKEN, "a", "b", "c")


def test_config_checks_and_builds_one_decoder_config():
    config = CausalLMConfig()
    model_config = config.transformer_config(len(VOCABULARY))
    assert model_config.kind == "decoder-only" and model_config.dropout == 0.0
    assert model_config.max_length == config.context and model_config.pad_id == 0
    assert (model_config.d_model, model_config.num_layers) == (config.d_model, config.num_layers)
    for name in ("d_model", "num_heads", "num_layers", "context", "batch_size", "steps"):
        with pytest.raises(ValueError, match=f"{name} must be a positive int"):
            CausalLMConfig(**{name: 0})
    with pytest.raises(ValueError, match="learning_rate must be positive"):
        CausalLMConfig(learning_rate=0.0)


def test_training_windows_are_shifted_by_one_and_seeded():
    ids = torch.arange(40)
    inputs, targets = training_windows(ids, 8, 5, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (5, 8)
    assert torch.equal(targets[:, :-1], inputs[:, 1:])  # the same window, one step on
    assert torch.equal(targets, inputs + 1)  # ids are positions here
    again, _ = training_windows(ids, 8, 5, torch.Generator().manual_seed(0))
    assert torch.equal(inputs, again)
    last = training_windows(ids, 39, 50, torch.Generator().manual_seed(1))[1]
    assert int(last.max()) == 39  # the last token can be a target
    with pytest.raises(ValueError, match="a window needs context"):
        training_windows(torch.arange(8), 8, 2, torch.Generator())
    with pytest.raises(ValueError, match=r"1-D tensor \(N,\)"):
        training_windows(torch.zeros(2, 20, dtype=torch.long), 8, 2, torch.Generator())


def test_next_token_loss_is_cross_entropy_per_token():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]]))  # (1, 2, 3)
    targets = torch.tensor([[0, 1]])
    expected = -(math.log(0.5) + math.log(0.8)) / 2
    assert next_token_loss(logits, targets).item() == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"logits must be \(B, T, \|V\|\)"):
        next_token_loss(logits[0], targets)


def test_training_is_reproducible():
    config = CausalLMConfig(steps=5)
    first, second = train_char_lm(config, causal=True), train_char_lm(config, causal=True)
    assert first.losses == second.losses and len(first.losses) == 5
    assert not first.model.training
    for mine, again in zip(first.model.parameters(), second.model.parameters(), strict=True):
        assert torch.equal(mine, again)
    threads = torch.get_num_threads()
    train_char_lm(CausalLMConfig(steps=1), causal=False)
    assert torch.get_num_threads() == threads  # restored


def test_both_runs_start_from_the_same_model_on_the_same_windows():
    config = CausalLMConfig(steps=1)
    honest, cheater = train_char_lm(config, causal=True), train_char_lm(config, causal=False)
    model = DecoderOnly(config.transformer_config(len(VOCABULARY)),
                        generator=torch.Generator().manual_seed(config.seed))  # fmt: skip
    inputs, targets = training_windows(
        VOCABULARY.encode(TRAINING_TEXT), config.context, config.batch_size,
        torch.Generator().manual_seed(config.seed + 1),
    )  # fmt: skip
    with torch.no_grad():
        for run, causal in ((honest, True), (cheater, False)):
            loss = next_token_loss(model(inputs, causal=causal).logits, targets).item()
            assert run.losses[0] == pytest.approx(loss, abs=1e-6)


def test_the_model_without_the_mask_cheats(trained):
    config, honest, cheater = trained
    honest_train = sum(honest.losses[-20:]) / 20
    cheater_train = sum(cheater.losses[-20:]) / 20
    assert cheater_train < honest_train / 2, "without the mask the training loss is far lower"
    held_out = VOCABULARY.encode(HELD_OUT_TEXT)
    fair = {run.causal: evaluate(run.model, held_out, config.context) for run in trained[1:]}
    assert fair[True].predictions == len(HELD_OUT_TEXT) - 1
    assert fair[True].accuracy > 0.8 and fair[True].loss < 0.5
    assert fair[False].loss > 3 * fair[True].loss and fair[False].accuracy < 0.7
    own = evaluate(cheater.model, held_out, config.context, causal=False)
    assert own.accuracy > 0.9, "evaluated the way it was trained, the cheater looks superb"


def test_generation_honest_and_cheating(trained):
    """Greedy generation from a model this small can loop even when honest ("the dog the dog"),
    and one seed can go either way on one prompt; averaged over seeds and prompts the cheater
    writes far fewer real word pairs (measured, seeds 0-2: about 0.85 against 0.5)."""
    config, honest, cheater = trained
    fractions = {True: [], False: []}
    for seed in range(3):
        runs = (honest, cheater)
        if seed > 0:
            seeded = dataclasses.replace(config, seed=seed)
            runs = (train_char_lm(seeded, causal=True), train_char_lm(seeded, causal=False))
        for prompt in ("the cat ", "the fox "):
            for run in runs:
                text = generate_text(run.model, VOCABULARY, prompt, 48, config.context)
                assert len(text) == len(prompt) + 48 and text.startswith(prompt)
                fractions[run.causal].append(known_ngram_fraction(text[len(prompt) :], 2))
    honest_mean = sum(fractions[True]) / len(fractions[True])
    cheater_mean = sum(fractions[False]) / len(fractions[False])
    assert honest_mean > 0.75 and cheater_mean < honest_mean - 0.2, fractions


def test_generate_text_reads_only_the_last_context_characters():
    model = _untrained()
    long_prompt = "the cat sat on the mat. the dog"  # longer than the 16-position table
    text = generate_text(model, VOCABULARY, long_prompt, 3, context=16)
    assert text.startswith(long_prompt) and len(text) == len(long_prompt) + 3
    assert not model.training
    model.train()
    generate_text(model, VOCABULARY, "the", 1, context=16)
    assert model.training  # the caller's mode is restored
    with pytest.raises(ValueError, match="prompt is empty"):
        generate_text(model, VOCABULARY, "", 3, context=16)
    with pytest.raises(ValueError, match="new_characters must be a positive int"):
        generate_text(model, VOCABULARY, "the", 0, context=16)


def test_evaluate_counts_every_next_character_and_checks_input():
    model = _untrained()
    ids = VOCABULARY.encode(HELD_OUT_TEXT[:40])
    result = evaluate(model, ids, context=16)
    assert result.predictions == 39 and 0 <= result.accuracy <= 1
    with torch.no_grad():  # by hand: windows 0-15, 16-31, 32-38
        total = 0.0
        for start in (0, 16, 32):
            window = ids[start : min(start + 16, 39)]
            target = ids[start + 1 : start + 1 + len(window)]
            total += next_token_loss(model(window[None]).logits, target[None]).item() * len(window)
    assert result.loss == pytest.approx(total / 39, rel=1e-6)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        evaluate(model, ids[:1], context=16)


def test_known_ngram_fraction_by_hand():
    text = "the cat cat sat sat on the mat. the do"  # the unfinished "do" is dropped
    assert known_ngram_fraction(text, 1) == 1.0
    assert known_ngram_fraction(text, 2) == pytest.approx(7 / 9)  # cat-cat, sat-sat unknown
    assert known_ngram_fraction("the dox saw ", 1) == pytest.approx(2 / 3)
    assert known_ngram_fraction("", 1) == 0.0 and known_ngram_fraction("ton", 2) == 0.0
    with pytest.raises(ValueError, match="n must be a positive int"):
        known_ngram_fraction("the cat ", 0)


def test_prefix_by_prefix_equals_the_masked_parallel_pass():
    model = _untrained()
    ids = VOCABULARY.encode("the dog sat on t")[None]  # (1, 16)
    one_by_one = prefix_by_prefix_logits(model, ids)
    assert one_by_one.shape == (1, 16, len(VOCABULARY))
    with torch.no_grad():
        masked = model(ids, causal=True).logits
        unmasked = model(ids, causal=False).logits
    torch.testing.assert_close(one_by_one, masked, atol=1e-5, rtol=0)
    gap = (unmasked - one_by_one).abs().amax(dim=-1)[0]  # (T,)
    assert (gap[:-1] > 1e-3).all()  # every earlier position sees the future without the mask
    assert gap[-1] > 1e-4  # two layers: even the last position changes
    one_layer = _untrained(num_layers=1)
    with torch.no_grad():
        last = one_layer(ids, causal=False).logits[0, -1]
    torch.testing.assert_close(
        last, prefix_by_prefix_logits(one_layer, ids)[0, -1], atol=1e-5, rtol=0
    )
    with pytest.raises(ValueError, match=r"ids must have shape \(B, T\)"):
        prefix_by_prefix_logits(model, ids[0])


def test_next_character_entropy_counts_what_the_context_leaves_open():
    text = "abac" * 25  # after "a": "b" or "c", half and half; after "b" or "c": always "a"
    entropy = next_character_entropy(text, context=1)
    starts = text[:99]  # the 99 window starts
    assert entropy == {1: pytest.approx(starts.count("a") * math.log(2) / 99)}
    two = next_character_entropy(text, context=2)
    assert two[2] == pytest.approx(0.0)  # "ba" -> "c", "ca" -> "b", "ab" -> "a", "ac" -> "a"
    assert next_character_entropy("aaaa", context=3) == {1: 0.0, 2: 0.0, 3: 0.0}
    with pytest.raises(ValueError, match="context"):
        next_character_entropy(text, context=0)
    with pytest.raises(ValueError, match="a window needs context"):
        next_character_entropy("ab", context=2)
