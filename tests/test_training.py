"""Tests for training.py: the reversal task's data, the training loop, the shipped weights."""

import dataclasses
import itertools
import json
import math

import numpy as np
import pytest
import torch

from transformer_tutorial.model import optim
from transformer_tutorial.model.transformer import build_model, count_parameters, paper_base
from transformer_tutorial.studies import reversal
from transformer_tutorial.studies.reversal import (
    END_ID,
    LETTER_IDS,
    PAD_ID,
    START_ID,
    VOCABULARY,
    TrainingConfig,
    attention_records,
    correct,
    decode,
    encode,
    exact_match,
    held_out_words,
    load_trained_config,
    load_trained_model,
    load_training_log,
    make_batch,
    next_token_probabilities,
    random_words,
    trace_shapes,
    train,
    training_batches,
    translate,
)

QUICK = TrainingConfig(steps=12, warmup_steps=4, log_every=5, held_out_size=50, monitor_size=20)


@pytest.fixture(scope="module")
def shipped():
    return load_trained_model()


# --- Words and batches ---------------------------------------------------------------------


def test_vocabulary_layout():
    assert VOCABULARY[:3] == ("[PAD]", "[START]", "[END]") and len(VOCABULARY) == 29
    assert (PAD_ID, START_ID, END_ID) == (0, 1, 2)
    assert decode(LETTER_IDS) == "abcdefghijklmnopqrstuvwxyz"


def test_encode_decode_round_trip():
    assert encode("Attention") == (3, 22, 22, 7, 16, 22, 11, 17, 16)
    assert decode(encode("attention")) == "attention"
    assert decode([START_ID, 3, END_ID, PAD_ID]) == "[START]a[END][PAD]"


@pytest.mark.parametrize("text", ["", "two words", "café", "abc1", None])
def test_encode_refuses_what_is_not_letters(text):
    with pytest.raises(ValueError, match=r"text must be|only knows the letters"):
        encode(text)


def test_decode_refuses_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 29\)"):
        decode([3, 29])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batch_holds_source_and_shifted_reversed_target(seed):
    words = random_words(16, TrainingConfig(), torch.Generator().manual_seed(seed))
    batch = make_batch(words)
    width = max(len(word) for word in words) + 1
    assert batch.source.shape == batch.target_in.shape == batch.target_out.shape == (16, width)
    assert batch.words == words
    for row, word in enumerate(words):
        n = len(word)
        padding = [PAD_ID] * (width - n - 1)
        assert batch.source[row].tolist() == [*word, END_ID, *padding]
        assert batch.target_out[row].tolist() == [*word[::-1], END_ID, *padding]
        assert batch.target_in[row].tolist() == [START_ID, *word[::-1], *padding]
    # teacher forcing: the decoder reads at t + 1 what it had to write at t
    real = batch.target_out[:, :-1] != END_ID
    assert torch.equal(batch.target_in[:, 1:][real], batch.target_out[:, :-1][real])


@pytest.mark.parametrize("words", [[], [()], [(3, 2)], [(3, 29)]])
def test_make_batch_refuses_bad_words(words):
    with pytest.raises(ValueError, match=r"words is empty|letter ID"):
        make_batch(words)


def test_random_words_follow_the_config_and_the_seed():
    config = TrainingConfig(min_length=4, max_length=6)
    words = random_words(2000, config, torch.Generator().manual_seed(5))
    assert {len(word) for word in words} == {4, 5, 6}
    assert {letter for word in words for letter in word} == set(LETTER_IDS)
    assert words == random_words(2000, config, torch.Generator().manual_seed(5))
    assert words != random_words(2000, config, torch.Generator().manual_seed(6))


def test_random_words_never_return_an_excluded_word():
    config = TrainingConfig(min_length=2, max_length=2, held_out_size=300, monitor_size=200)
    excluded = frozenset(held_out_words(config))  # 300 of the 676 two-letter words
    drawn = random_words(5000, config, torch.Generator().manual_seed(0), exclude=excluded)
    assert not excluded & set(drawn)
    assert len(set(drawn)) == 676 - 300  # every other word still appears
    unfiltered = random_words(5000, config, torch.Generator().manual_seed(0))
    assert excluded & set(unfiltered)  # without the exclusion they would have come up


def test_held_out_words_are_distinct_fixed_and_independent_of_the_training_seed():
    words = held_out_words(TrainingConfig())
    assert len(words) == len(set(words)) == 1000
    assert {len(word) for word in words} == set(range(3, 11))
    assert words == held_out_words(TrainingConfig(seed=7))


def test_training_batches_never_contain_a_held_out_word():
    config = TrainingConfig()
    held_out = set(held_out_words(config))
    seen = [word for batch in training_batches(config) for word in batch.words]
    assert len(seen) == config.steps * config.batch_size
    assert not held_out & set(seen)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"min_length": 0}, "min_length must be a positive int"),
        ({"min_length": 5, "max_length": 4}, "must not exceed max_length"),
        ({"position_table": 10}, "must cover the longest source"),
        ({"learning_rate": 0.0}, "learning_rate must be positive"),
        ({"warmup_steps": 500}, "must be below steps"),
        ({"seed": -1}, "seed must be a non-negative int"),
        ({"held_out_seed": 1.5}, "held_out_seed must be a non-negative int"),
        ({"monitor_size": 2000}, "exceeds held_out_size"),
        (
            {"min_length": 1, "max_length": 1, "held_out_size": 20, "monitor_size": 5},
            "more than half",
        ),
        ({"num_heads": 3}, "num_heads"),
    ],
)
def test_config_refuses_bad_values(changes, message):
    with pytest.raises(ValueError, match=message):
        TrainingConfig(**changes).model_config()


def test_learning_rate_warms_up_then_decays_to_zero():
    config = TrainingConfig()
    rates = [config.learning_rate_at(step) for step in range(config.steps)]
    assert rates[0] == pytest.approx(config.learning_rate / config.warmup_steps)
    assert max(rates) == rates[config.warmup_steps - 1] == pytest.approx(config.learning_rate)
    assert all(a <= b for a, b in itertools.pairwise(rates[:50]))
    assert all(a >= b for a, b in itertools.pairwise(rates[49:]))
    assert rates[-1] < 1e-4 * config.learning_rate  # the last step is nearly at 0


def test_model_config_is_the_papers_architecture_at_tiny_sizes():
    model_config = TrainingConfig().model_config()
    assert model_config.kind == "encoder-decoder" and not model_config.norm_first
    assert model_config.positional == "sinusoidal" and model_config.tie_embeddings
    assert model_config.vocab_size == 29 and model_config.dropout == 0.0
    assert count_parameters(model_config) == 60_320


# --- Training --------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_adam_is_torch_adam_with_the_papers_betas(seed):
    ours, theirs = (torch.nn.Linear(6, 4) for _ in range(2))
    theirs.load_state_dict(ours.state_dict())
    adam = optim.Adam(ours.parameters(), betas=(0.9, 0.98), eps=1e-9)
    initial = ours.weight.detach().clone()
    reference = torch.optim.Adam(theirs.parameters(), lr=0.01, betas=(0.9, 0.98), eps=1e-9)
    inputs = torch.randn(16, 6, generator=torch.Generator().manual_seed(seed))
    for step in range(25):
        rate = 0.01 * (step + 1) / 25
        for group in reference.param_groups:
            group["lr"] = rate
        adam.zero_grad()
        ours(inputs).tanh().square().sum().backward()
        adam.step(rate)
        reference.zero_grad()
        theirs(inputs).tanh().square().sum().backward()
        reference.step()
    for mine, expected in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(mine, expected, rtol=0, atol=1e-7)
    assert not torch.equal(ours.weight, initial)  # it did train


def test_adam_with_pytorchs_defaults_matches_torch_exactly():
    def train(optimiser_class):
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        with torch.no_grad():
            for index, parameter in enumerate(model.parameters()):
                parameter.copy_(
                    torch.randn(parameter.shape, generator=torch.Generator().manual_seed(index))
                )
        model[2].bias.requires_grad_(False)  # a frozen tensor is left alone
        optimiser = optimiser_class([p for p in model.parameters() if p.requires_grad], lr=3e-3)
        x = torch.randn(16, 4, generator=torch.Generator().manual_seed(9))
        for _ in range(25):
            loss = model(x).pow(2).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        return list(model.parameters())

    ours, theirs = train(optim.Adam), train(torch.optim.Adam)
    for mine, reference in zip(ours, theirs, strict=True):
        assert torch.equal(mine, reference)
    with pytest.raises(ValueError, match="parameters is empty"):
        optim.Adam([], lr=1e-3)
    with pytest.raises(ValueError, match="lr must be positive"):
        optim.Adam([torch.zeros(1, requires_grad=True)], lr=0.0)


def test_noam_learning_rate_warms_up_linearly_then_decays_as_one_over_root_step():
    rate = optim.noam_learning_rate
    peak = rate(4000)
    assert peak == pytest.approx(1 / math.sqrt(512 * 4000))  # 6.99e-4 for the base model
    assert peak == pytest.approx(6.99e-4, abs=1e-6)
    assert max(rate(step) for step in range(1, 20_000, 7)) <= peak
    assert rate(1000) == pytest.approx(peak / 4)  # linear before the peak
    assert rate(16_000) == pytest.approx(peak / 2)  # 1 / sqrt(step) after it
    assert rate(4000, d_model=1024) == pytest.approx(peak / math.sqrt(2))
    for bad in ({"step": 0}, {"step": 1, "warmup_steps": 0}, {"step": 2.0}):
        with pytest.raises(ValueError, match="must be a positive int"):
            rate(**bad)


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("ignore", [None, PAD_ID])
def test_label_smoothed_loss_equals_torch_cross_entropy_with_label_smoothing(epsilon, ignore):
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(40, 29, generator=generator, dtype=torch.float64) * 3
    targets = torch.randint(0, 29, (40,), generator=generator)
    targets[::5] = PAD_ID
    ours = optim.label_smoothed_loss(logits, targets, epsilon, ignore_index=ignore)
    theirs = torch.nn.functional.cross_entropy(
        logits, targets, label_smoothing=epsilon, ignore_index=-100 if ignore is None else ignore
    )
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_label_smoothed_loss_is_smallest_at_the_smoothed_target_not_at_certainty():
    # the smoothed target q puts 1 - eps + eps/V on the right token and eps/V on each other one:
    # the loss is minimised by predicting q itself (its minimum is q's entropy), not a one-hot
    epsilon, vocabulary = 0.1, 5
    q = torch.full((1, vocabulary), epsilon / vocabulary, dtype=torch.float64)
    q[0, 2] += 1 - epsilon
    target = torch.tensor([2])
    at_q = optim.label_smoothed_loss(q.log(), target, epsilon)
    entropy = -(q * q.log()).sum()
    torch.testing.assert_close(at_q, entropy)
    sure = torch.tensor([[0.0, 0.0, 30.0, 0.0, 0.0]], dtype=torch.float64)  # p(right) ~ 1
    assert optim.label_smoothed_loss(sure, target, epsilon) > at_q + 1
    with pytest.raises(ValueError, match="logits must be"):
        optim.label_smoothed_loss(q[0], target)
    with pytest.raises(ValueError, match="epsilon must lie"):
        optim.label_smoothed_loss(q, target, 1.0)
    with pytest.raises(ValueError, match="every target is ignore_index"):
        optim.label_smoothed_loss(q, target, ignore_index=2)


def test_a_short_run_logs_every_step_restores_threads_and_repeats_exactly():
    torch.set_num_threads(2)
    try:
        first, second = train(QUICK), train(QUICK)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    assert len(first.log.losses) == len(first.log.learning_rates) == 12
    assert first.log.eval_steps == [5, 10, 12]
    assert all(0.0 <= score <= 1.0 for score in first.log.exact_match)
    assert first.log.learning_rates == [QUICK.learning_rate_at(step) for step in range(12)]
    assert all(math.isfinite(loss) and loss > 0 for loss in first.log.losses)
    assert first.log.losses == second.log.losses
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(tensor, second.model.state_dict()[name]), name
    assert not first.model.training


def test_stopping_early_gives_the_first_steps_of_the_full_run():
    full, early = train(QUICK), train(QUICK, stop_after=6)
    assert early.log.losses == full.log.losses[:6]
    assert early.log.eval_steps == [5]
    with pytest.raises(ValueError, match="beyond the run's steps=12"):
        train(QUICK, stop_after=13)
    with pytest.raises(ValueError, match="stop_after must be a positive int"):
        train(QUICK, stop_after=0)


def test_save_and_load_round_trip(tmp_path):
    run = train(QUICK)
    weights, log = reversal.save_run(run, tmp_path)
    assert weights.stat().st_size < 1_000_000
    loaded = load_trained_model(tmp_path)
    assert load_trained_config(tmp_path) == QUICK
    for name, tensor in run.model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
    assert load_training_log(tmp_path) == run.log
    assert json.loads(log.read_text())["config"]["steps"] == 12


def test_loaders_name_the_missing_file(tmp_path):
    for loader in (load_trained_model, load_trained_config, load_training_log):
        with pytest.raises(
            FileNotFoundError, match=r"python -m transformer_tutorial\.studies\.reversal"
        ):
            loader(tmp_path)


# --- The shipped model -------------------------------------------------------------------


def test_shipped_weights_are_small_and_come_with_their_log_and_config():
    size = (reversal.WEIGHTS_DIR / reversal.WEIGHTS_FILE).stat().st_size
    assert size < 300_000
    assert load_trained_config() == TrainingConfig()
    log = load_training_log()
    assert len(log.losses) == TrainingConfig().steps
    assert log.losses[-1] < 0.05 < log.losses[0]


def test_shipped_model_reverses_held_out_words(shipped):
    assert exact_match(shipped, held_out_words(TrainingConfig())) >= 0.99
    assert translate(shipped, ["attention", "abc", "Transform"]) == [
        "noitnetta",
        "cba",
        "mrofsnart",
    ]


def test_correct_flags_each_word_and_exact_match_is_their_mean(shipped):
    words = [encode("banana"), encode("xyz")]
    assert correct(shipped, words) == [True, True]
    untrained = build_model(TrainingConfig().model_config(), torch.Generator().manual_seed(0))
    flags = correct(untrained, held_out_words(TrainingConfig())[:100])
    assert exact_match(untrained, held_out_words(TrainingConfig())[:100]) == sum(flags) / 100
    assert sum(flags) < 5  # an untrained model reverses (almost) nothing
    with pytest.raises(ValueError, match="words is empty"):
        exact_match(shipped, [])
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        correct(shipped, words, batch_size=0)


def test_translate_refuses_bad_input(shipped):
    with pytest.raises(ValueError, match="non-empty list"):
        translate(shipped, "abc")
    with pytest.raises(ValueError, match="only knows the letters"):
        translate(shipped, ["ab c"])


def test_retraining_reproduces_the_shipped_files(tmp_path, capsys):
    """`python -m transformer_tutorial.studies.reversal` again (about 30 s): bit for bit on the
    machine that made the files; on any other, weights within float32 rounding and the same
    log, because training runs in float64 (studies/reproducible.py)."""
    assert reversal.main(["--output", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "held-out exact match: " in printed
    score = float(printed.split("held-out exact match: ")[1].split("%")[0]) / 100
    assert score >= 0.99
    retrained, shipped = load_trained_model(tmp_path), load_trained_model()
    for (name, mine), theirs in zip(
        retrained.state_dict().items(), shipped.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-7, msg=name)
    mine, theirs = load_training_log(tmp_path), load_training_log()
    assert mine.exact_match == theirs.exact_match and mine.eval_steps == theirs.eval_steps
    assert mine.learning_rates == theirs.learning_rates
    assert mine.losses == pytest.approx(theirs.losses, rel=1e-6)


# --- What chapter 9 shows -------------------------------------------------------------------


def test_trace_shapes_of_a_model_of_the_papers_width():
    paper_sizes = dataclasses.replace(paper_base(), num_layers=1, num_decoder_layers=1, dropout=0.0)
    model = build_model(paper_sizes, torch.Generator().manual_seed(0))
    source = torch.randint(3, 37000, (2, 7), generator=torch.Generator().manual_seed(1))
    target = torch.randint(3, 37000, (2, 5), generator=torch.Generator().manual_seed(2))
    names = [
        "encoder.embeddings",  # shared: called for the source, then for the target
        "encoder.layers.0.self_attention",
        "encoder",
        "decoder.layers.0.self_attention",
        "decoder.layers.0.cross_attention",
        "head",
    ]
    rows = trace_shapes(model, source, target, names)
    assert [row.name for row in rows] == [
        "encoder.embeddings",
        "encoder.layers.0.self_attention",
        "encoder",
        "encoder.embeddings",
        "decoder.layers.0.self_attention",
        "decoder.layers.0.cross_attention",
        "head",
    ]
    assert [rows[0].inputs, rows[0].outputs] == [[(2, 7)], [(2, 7, 512)]]
    assert [rows[3].inputs, rows[3].outputs] == [[(2, 5)], [(2, 5, 512)]]
    assert rows[1].outputs == [(2, 7, 512), (2, 8, 7, 7)]
    assert rows[2].kind == "Stack" and rows[2].outputs == [(2, 7, 512)]
    assert rows[4].outputs == [(2, 5, 512), (2, 8, 5, 5)]
    assert rows[5].inputs == [(2, 5, 512), (2, 7, 512)] and rows[5].outputs[1] == (2, 8, 5, 7)
    assert rows[6].outputs == [(2, 5, 37000)]
    every = trace_shapes(model, source, target)
    assert len(every) > len(names)
    assert not model.encoder._forward_hooks  # hooks are removed afterwards
    with pytest.raises(ValueError, match="no modules named"):
        trace_shapes(model, source, target, ["decoder.layers.9"])


def test_attention_records_have_the_three_kinds_and_the_anti_diagonal(shipped):
    records = attention_records(shipped, ["attention", "xyz"])
    assert list(records) == ["encoder self-attention", "decoder self-attention", "cross-attention"]
    encoder, decoder, cross = (records[kind][0] for kind in records)
    assert encoder.label == "attention → noitnetta"
    assert encoder.tokens == [*"attention", "[END]"] and encoder.keys == encoder.tokens
    assert decoder.tokens == ["[START]", *"noitnett", "a"] and decoder.keys == decoder.tokens
    assert cross.tokens == decoder.tokens and cross.keys == encoder.tokens
    assert cross.layer_names == ["decoder layer 1", "decoder layer 2"]
    assert encoder.weights.shape == (2, 4, 10, 10) and cross.weights.shape == (2, 4, 10, 10)
    for record in (encoder, decoder, cross):
        assert record.weights.sum(axis=-1) == pytest.approx(1.0, abs=1e-6)
    upper = torch.triu(torch.ones(10, 10, dtype=torch.bool), diagonal=1).numpy()
    assert (decoder.weights[..., upper] == 0).all()  # causal: nothing from the future
    # the last layer's cross-attention, averaged over heads, peaks at source position n-1-t
    # for output letter t (query t reads [START] or letter t-1 and must write letter t)
    peaks = cross.weights[-1].mean(axis=0).argmax(axis=-1)  # (T,)
    assert peaks[:9].tolist() == list(range(8, -1, -1))


def test_attention_summary_finds_the_mirror_in_the_last_layer_only_after_training(shipped):
    words = held_out_words(TrainingConfig())[:200]
    summary = reversal.attention_summary(shipped, words)
    assert summary.cross_on_mirror.shape == summary.encoder_on_end.shape == (2, 4)
    assert (summary.cross_peak_on_mirror[-1] > 0.9).all()  # every head of layer 2
    assert (summary.cross_on_mirror[-1] > 0.6).all()
    assert (summary.cross_peak_on_mirror[0] < 0.5).all()  # layer 1 does something else
    assert ((0 <= summary.encoder_on_end) & (summary.encoder_on_end <= 1)).all()
    untrained = build_model(TrainingConfig().model_config(), torch.Generator().manual_seed(0))
    assert (reversal.attention_summary(untrained, words).cross_on_mirror < 0.3).all()
    # one word by hand: the mirror weight is read at [b, h, t, n - 1 - t]
    single = reversal.attention_summary(shipped, [encode("abc")])
    result = shipped(
        *[torch.tensor([ids]) for ids in ((3, 4, 5, 2), (1, 5, 4, 3))], need_weights=True
    )
    cross = result.decoder.cross_attention[1][0]  # (H, T, S)
    expected = (cross[:, 0, 2] + cross[:, 1, 1] + cross[:, 2, 0]) / 3  # (H,)
    assert single.cross_on_mirror[1] == pytest.approx(expected.detach().numpy(), abs=1e-6)


def test_attention_summary_measures_start_end_and_the_tail_by_hand(shipped):
    summary = reversal.attention_summary(shipped, [encode("abc"), encode("abcde")])
    assert summary.decoder_on_start.shape == (2, 4, 6)  # (L, H, T), T = 5 letters + [END]
    np.testing.assert_allclose(summary.decoder_on_start[:, :, 0], 1.0, atol=1e-6)  # only [START]
    assert np.isnan(summary.decoder_on_start[:, :, 5]).all()  # no word writes a 6th letter
    # "abc": the last three letters and [END] are the whole source; "abcde": 4 of its 6 tokens
    assert summary.tail_if_uniform == pytest.approx((3 * 1 + 5 * 4 / 6) / 8)
    assert (summary.cross_on_tail >= summary.cross_on_end - 1e-6).all()
    result = shipped(
        *[torch.tensor([ids]) for ids in ((3, 4, 5, 2), (1, 5, 4, 3))], need_weights=True
    )
    single = reversal.attention_summary(shipped, [encode("abc")])
    on_end = result.decoder.cross_attention[0][0][:, :3, 3].mean(dim=-1)  # (H,): layer 1
    assert single.cross_on_end[0] == pytest.approx(on_end.detach().numpy(), abs=1e-6)
    start = result.decoder.self_attention[1][0][:, 2, 0]  # (H,): layer 2, row 2, on [START]
    assert single.decoder_on_start[1, :, 2] == pytest.approx(start.detach().numpy(), abs=1e-6)


def test_beam_search_on_the_shipped_model_reverses_held_out_words(shipped):
    words = ["".join(VOCABULARY[i] for i in word) for word in held_out_words(TrainingConfig())]
    for word in words[:100]:
        outputs = reversal.beam_translate(shipped, word)
        assert outputs[0][0] == word[::-1]
        scores = [score for _, _, score in outputs]
        assert scores == sorted(scores, reverse=True) and len(outputs) <= 4
    assert reversal.beam_translate(shipped, "attention", beam_size=1)[0][0] == "noitnetta"
    assert reversal.beam_translate(shipped, "level", alpha=0.0)[0][0] == "level"


def test_next_token_probabilities_match_greedy_decoding(shipped):
    logits, probabilities = next_token_probabilities(shipped, "attention", "noi")
    assert logits.shape == probabilities.shape == (29,)
    assert float(probabilities.sum()) == pytest.approx(1.0)
    assert VOCABULARY[int(probabilities.argmax())] == "t"
    _, at_end = next_token_probabilities(shipped, "attention", "noitnetta")
    assert int(at_end.argmax()) == END_ID
    with pytest.raises(ValueError, match="longer than the position table"):
        next_token_probabilities(shipped, "abc", "a" * 40)
