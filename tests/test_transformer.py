"""Tests for transformer_tutorial.model.transformer (paper section 3, Figure 1)."""

import itertools

import pytest
import torch
from torch import nn

from transformer_tutorial.model.masks import causal_mask, padding_mask
from transformer_tutorial.model.transformer import (
    DecoderLayer,
    DecoderOnly,
    EncoderDecoder,
    EncoderLayer,
    EncoderOnly,
    Stack,
    TransformerConfig,
    beam_search,
    bert_base,
    build_model,
    copy_decoder_layer_from_torch,
    copy_encoder_layer_from_torch,
    count_parameters,
    generate,
    gpt2_small,
    greedy_translate,
    length_penalty,
    paper_base,
    paper_big,
    parameter_breakdown,
)

VOCAB = 23


def _config(kind="encoder-decoder", **changes) -> TransformerConfig:
    sizes = dict(vocab_size=VOCAB, d_model=16, num_heads=4, d_ff=24, num_layers=2, max_length=40)
    sizes.update(dropout=0.0, kind=kind)
    sizes.update(changes)
    return TransformerConfig(**sizes)


def _model(kind="encoder-decoder", seed=0, **changes):
    return build_model(_config(kind, **changes), torch.Generator().manual_seed(seed)).eval()


def _ids(batch, length, seed, low=1):
    return torch.randint(low, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _randomise(module: nn.Module, seed: int) -> None:
    """PyTorch starts biases at 0 and LayerNorm at (1, 0): make every number matter."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(
                torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype)
            )
            parameter.mul_(0.3)


# Equality with PyTorch's own layers ---------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_layer_equals_nn_transformer_encoder_layer(norm_first, activation, seed):
    reference = nn.TransformerEncoderLayer(
        16, 4, 24, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first,
        dtype=torch.float64,
    ).eval()  # fmt: skip
    _randomise(reference, seed)
    config = _config(norm_first=norm_first, activation=activation)
    ours = copy_encoder_layer_from_torch(EncoderLayer(config).double(), reference)
    x = torch.randn(3, 7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    keep = padding_mask([7, 5, 2])  # True = real key
    output, _ = ours(x, keep)
    torch.testing.assert_close(output, reference(x, src_key_padding_mask=~keep[:, 0, 0]))
    torch.testing.assert_close(ours(x)[0], reference(x))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_layer_equals_nn_transformer_decoder_layer(norm_first, seed):
    reference = nn.TransformerDecoderLayer(
        16, 4, 24, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64
    ).eval()
    _randomise(reference, seed)
    ours = copy_decoder_layer_from_torch(
        DecoderLayer(_config(norm_first=norm_first)).double(), reference
    )
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, 16, dtype=torch.float64, generator=generator)
    memory = torch.randn(2, 6, 16, dtype=torch.float64, generator=generator)
    memory_keep = padding_mask([6, 3])
    output, self_weights, cross_weights = ours(
        x, causal_mask(5), memory, memory_keep, need_weights=True
    )
    expected = reference(
        x,
        memory,
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64),
        memory_key_padding_mask=~memory_keep[:, 0, 0],
    )
    torch.testing.assert_close(output, expected)
    assert self_weights.shape == (2, 4, 5, 5) and cross_weights.shape == (2, 4, 5, 6)
    assert (cross_weights[1, :, :, 3:] == 0).all()


def test_copy_refuses_mismatched_layers():
    reference = nn.TransformerEncoderLayer(16, 4, 24, batch_first=True, norm_first=True)
    with pytest.raises(ValueError, match="norm_first"):
        copy_encoder_layer_from_torch(EncoderLayer(_config()), reference)
    with pytest.raises(ValueError, match="d_ff"):
        copy_encoder_layer_from_torch(EncoderLayer(_config(d_ff=32, norm_first=True)), reference)
    decoder = nn.TransformerDecoderLayer(16, 4, 24, batch_first=True)
    with pytest.raises(ValueError, match="no cross-attention"):
        copy_decoder_layer_from_torch(DecoderLayer(_config(), cross_attention=False), decoder)


# Shapes, kinds, and the data flow ------------------------------------------------------------


def test_encoder_decoder_shapes_and_weights():
    model = _model()
    source, target = _ids(3, 7, 0), _ids(3, 5, 1)
    output = model(source, target, need_weights=True)
    assert output.logits.shape == (3, 5, VOCAB)
    assert output.encoder.hidden.shape == (3, 7, 16)
    assert len(output.encoder.hidden_states) == 3  # embeddings + 2 layers
    assert [w.shape for w in output.encoder.self_attention] == [(3, 4, 7, 7)] * 2
    assert [w.shape for w in output.decoder.self_attention] == [(3, 4, 5, 5)] * 2
    assert [w.shape for w in output.decoder.cross_attention] == [(3, 4, 5, 7)] * 2
    for weights in output.decoder.self_attention:  # causal: nothing above the diagonal
        assert (weights.triu(diagonal=1) == 0).all()
    for weights in output.encoder.self_attention + output.decoder.cross_attention:
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    assert model(source, target).encoder.self_attention == []


@pytest.mark.parametrize("kind", ["encoder-decoder", "encoder-only", "decoder-only"])
def test_build_model_makes_each_kind_from_the_same_layers(kind):
    model = _model(kind)
    expected = {"encoder-decoder": EncoderDecoder, "encoder-only": EncoderOnly}
    assert isinstance(model, expected.get(kind, DecoderOnly))
    stacks = [module for module in model.modules() if isinstance(module, Stack)]
    layers = {type(layer) for stack in stacks for layer in stack.layers}
    if kind == "encoder-decoder":
        assert layers == {EncoderLayer, DecoderLayer}
    elif kind == "encoder-only":
        assert layers == {EncoderLayer}
    else:
        assert layers == {DecoderLayer}
        assert all(layer.cross_attention is None for layer in stacks[0].layers)


def test_tied_output_layer_shares_the_embedding_matrix():
    model = _model()
    source_table = model.encoder.embeddings.token.weight
    assert model.decoder.embeddings.token.weight is source_table
    torch.testing.assert_close(
        model.head(torch.eye(16)[None]), source_table.T[None], rtol=0, atol=0
    )
    untied = _model(tie_embeddings=False)
    difference = count_parameters(untied) - count_parameters(model)
    assert difference == 16 * VOCAB


def test_separate_target_vocabulary():
    model = _model(target_vocab_size=11)
    output = model(_ids(2, 4, 0), _ids(2, 3, 1)[:, :3] % 11)
    assert output.logits.shape == (2, 3, 11)
    assert model.decoder.embeddings is not model.encoder.embeddings


def test_pre_ln_stacks_end_with_a_layer_norm_and_post_ln_stacks_do_not():
    assert _model("decoder-only", norm_first=True).decoder.final_norm is not None
    assert _model("decoder-only").decoder.final_norm is None


def test_embeddings_scale_add_positions_types_and_norm():
    model = _model("encoder-only", type_vocab_size=2, pad_id=None)
    embeddings = model.encoder.embeddings
    ids = _ids(1, 3, 0)
    types = torch.tensor([[0, 1, 1]])
    expected = (
        embeddings.token.weight[ids] * 4.0  # sqrt(16)
        + embeddings.position.table[:3]
        + embeddings.token_type.weight[types]
    )
    torch.testing.assert_close(embeddings(ids, types), expected)
    torch.testing.assert_close(embeddings(ids), embeddings(ids, torch.zeros_like(ids)))


# Invariants -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("position", [0, 3, 6])
def test_decoder_only_is_causal(position, seed):
    model = _model("decoder-only", seed=seed, pad_id=None)
    ids = _ids(2, 8, seed)
    changed = ids.clone()
    changed[:, position + 1 :] = _ids(2, 8 - position - 1, seed + 100)
    before, after = model(ids).logits, model(changed).logits
    torch.testing.assert_close(before[:, : position + 1], after[:, : position + 1])
    if position < 7:
        assert not torch.allclose(before[:, position + 1 :], after[:, position + 1 :])


def test_decoder_only_without_the_mask_looks_ahead():
    model = _model("decoder-only", pad_id=None)
    ids = _ids(1, 6, 0)
    changed = ids.clone()
    changed[0, 5] = ids[0, 5] % (VOCAB - 1) + 1  # any other token
    first = model(ids, causal=False).logits[0, 0]
    assert not torch.allclose(first, model(changed, causal=False).logits[0, 0])


@pytest.mark.parametrize("seed", range(3))
def test_encoder_decoder_decoder_is_causal_in_the_target(seed):
    model = _model(seed=seed)
    source, target = _ids(2, 6, seed), _ids(2, 7, seed + 1)
    changed = target.clone()
    changed[:, 4:] = _ids(2, 3, seed + 2)
    before, after = model(source, target).logits, model(source, changed).logits
    torch.testing.assert_close(before[:, :4], after[:, :4])


@pytest.mark.parametrize("kind", ["encoder-decoder", "encoder-only", "decoder-only"])
def test_padding_never_changes_real_positions(kind):
    model = _model(kind)
    ids = _ids(2, 5, 0)
    padded = torch.cat([ids, torch.zeros(2, 3, dtype=torch.long)], dim=1)  # 3 x [PAD] = 0
    other_padding = torch.cat([ids, _ids(2, 3, 9)], dim=1)  # junk in the padded slots
    keep = torch.tensor([[1] * 5 + [0] * 3] * 2)
    if kind == "encoder-decoder":
        target = _ids(2, 4, 1)
        reference = model(ids, target).logits
        torch.testing.assert_close(model(padded, target).logits, reference)
        torch.testing.assert_close(model(other_padding, target, source_mask=keep).logits, reference)
    else:
        reference = model(ids).logits
        torch.testing.assert_close(model(padded).logits[:, :5], reference)
        torch.testing.assert_close(model(other_padding, keep).logits[:, :5], reference)


@pytest.mark.parametrize("kind", ["encoder-decoder", "encoder-only", "decoder-only"])
def test_no_nan_with_a_fully_padded_sequence_in_the_batch(kind):
    model = _model(kind).train()  # gradients too
    ids = _ids(2, 5, 0)
    ids[1] = 0  # the second sequence is all [PAD]: every query row has no key
    if kind == "encoder-decoder":
        output = model(ids, _ids(2, 4, 1), need_weights=True)
        stacks = [output.encoder, output.decoder]
    else:
        output = model(ids, need_weights=True)
        stacks = [output.encoder or output.decoder]
    assert torch.isfinite(output.logits).all()
    for stack in stacks:
        for weights in stack.self_attention + stack.cross_attention:
            assert torch.isfinite(weights).all()
    if kind != "decoder-only":  # (a causal row always sees itself; an encoder row sees nothing)
        assert (stacks[0].self_attention[0][1] == 0).all()
    output.logits.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_encoder_is_permutation_equivariant_without_positions():
    model = _model("encoder-only", pad_id=None)
    stack = model.encoder
    x = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(0))
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    for layer in stack.layers:
        torch.testing.assert_close(layer(x[:, order])[0], layer(x)[0][:, order])


def test_generate_appends_greedy_tokens_and_restores_the_mode():
    model = _model("decoder-only", pad_id=None).train()
    prompt = _ids(2, 3, 0)
    ids = generate(model, prompt, 4)
    assert model.training
    assert ids.shape == (2, 7) and torch.equal(ids[:, :3], prompt)
    model.eval()
    torch.testing.assert_close(ids[:, 3], model(prompt).logits[:, -1].argmax(-1))


def test_greedy_translate_matches_step_by_step_argmax():
    model = _model()
    source = _ids(2, 6, 0)
    translated = greedy_translate(model, source, start_id=1, length=4)
    assert translated.shape == (2, 4)
    target = torch.cat([torch.ones(2, 1, dtype=torch.long), translated], dim=1)
    logits = model(source, target).logits  # teacher forcing on its own output
    torch.testing.assert_close(logits[:, :4].argmax(-1), translated)


@pytest.mark.parametrize("seed", range(4))
def test_beam_of_one_is_greedy_decoding(seed):
    model = _model(seed=seed)
    source = _ids(1, 6, seed + 10)
    greedy = greedy_translate(model, source, start_id=1, length=7)[0].tolist()  # (length,)
    (only,) = beam_search(model, source, start_id=1, end_id=2, max_length=7, beam_size=1)
    end = greedy.index(2) + 1 if 2 in greedy else len(greedy)
    assert list(only.tokens) == greedy[:end]
    assert only.finished == (2 in greedy)


def _log_probability(model, source, tokens) -> float:
    target = torch.tensor([[1, *tokens[:-1]]])  # (1, t): [START] and all but the last
    with torch.no_grad():
        log_p = torch.log_softmax(model(source, target).logits.double(), dim=-1)[0]  # (t, V)
    return float(log_p[torch.arange(len(tokens)), torch.tensor(tokens)].sum())


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_a_wide_enough_beam_is_exhaustive_search(alpha):
    # vocabulary of 4 (IDs 0-3, end = 2), outputs of at most 3 tokens: a beam of 100 keeps
    # every prefix, so its best output is the best of all finished and unfinished sequences
    model = _model(vocab_size=4, seed=5)
    source = torch.tensor([[3, 1, 3]])
    found = beam_search(model, source, start_id=1, end_id=2, max_length=3, beam_size=100,
                        alpha=alpha)  # fmt: skip
    sequences = [
        (*prefix, 2) for n in range(3) for prefix in itertools.product((0, 1, 3), repeat=n)
    ] + list(itertools.product((0, 1, 3), repeat=3))  # finished ones, then unfinished ones
    assert len(found) == len(sequences)  # every sequence, once
    best = max(sequences, key=lambda s: _log_probability(model, source, s)
               / length_penalty(len(s), alpha))  # fmt: skip
    assert found[0].tokens == best
    for hypothesis in found:
        expected = _log_probability(model, source, hypothesis.tokens)
        assert hypothesis.log_probability == pytest.approx(expected, abs=1e-5)
        assert hypothesis.finished == (hypothesis.tokens[-1] == 2)
    scores = [hypothesis.score for hypothesis in found]
    assert scores == sorted(scores, reverse=True)


def test_length_penalty_is_wu_et_al_equation_14():
    assert length_penalty(1, 0.6) == 1.0
    assert length_penalty(7, 0.6) == pytest.approx(2**0.6)
    assert length_penalty(30, 0.0) == 1.0


# Published parameter counts --------------------------------------------------------------------


def test_gpt2_small_has_exactly_its_published_parameter_count():
    assert count_parameters(gpt2_small()) == 124_439_808
    assert gpt2_small().num_layers == 12


def test_bert_base_has_exactly_its_published_parameter_count():
    assert count_parameters(bert_base()) == 109_482_240


def _reference_count(model_class, config) -> int:
    """Parameters of a Hugging Face model built from its default config on the meta device
    (shapes only), each shared tensor counted once, as count_parameters does."""
    with torch.device("meta"):
        model = model_class(config)
    return sum(p.numel() for p in model.parameters())


def test_counts_equal_the_hugging_face_reference_models():
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    # BertConfig() and GPT2Config() default to bert-base-uncased's and gpt2's sizes; BertModel
    # includes the pooler, GPT2Model has no output layer (it is tied to the embedding anyway).
    assert BertConfig().hidden_size == 768 and GPT2Config().n_layer == 12
    assert count_parameters(bert_base()) == _reference_count(BertModel, BertConfig())
    assert count_parameters(gpt2_small()) == _reference_count(GPT2Model, GPT2Config())


@pytest.mark.parametrize(("config", "published"), [(paper_base, 65e6), (paper_big, 213e6)])
def test_paper_models_are_within_three_percent_of_table_3(config, published):
    # Table 3 rounds to millions and names the vocabulary only as "about 37000" tokens: no single
    # vocabulary size gives both 65M and 213M (see chapter 9), so we check 3 %.
    assert abs(count_parameters(config()) / published - 1) < 0.03


def test_counting_on_meta_equals_counting_a_real_model():
    config = _config()
    model = build_model(config)
    assert count_parameters(config) == count_parameters(model)
    assert sum(parameter_breakdown(config).values()) == count_parameters(model)


def test_breakdown_puts_two_thirds_of_a_layer_in_the_feed_forward_network():
    parts = parameter_breakdown(gpt2_small())
    assert parts["feed-forward"] == 12 * (2 * 768 * 3072 + 3072 + 768)
    assert parts["attention"] == 12 * 4 * (768 * 768 + 768)
    assert parts["embeddings"] == 50257 * 768 + 1024 * 768


# Errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: _config(kind="gpt"), "kind must be one of"),
        (lambda: beam_search(_model(), _ids(2, 3, 0), 1, 2, 5), r"one sequence of IDs \(1, S\)"),
        (lambda: beam_search(_model(), _ids(1, 3, 0), 1, 2, 5, beam_size=0), "beam_size"),
        (lambda: beam_search(_model(), _ids(1, 3, 0), 1, 2, 0), "max_length"),
        (lambda: beam_search(_model(), _ids(1, 3, 0), 1, 2, 5, alpha=-1.0), "alpha must be"),
        (lambda: _config(num_heads=5), "does not divide d_model"),
        (lambda: _config(num_layers=0), "num_layers"),
        (lambda: _config(activation="swish"), "activation"),
        (lambda: _config(positional="rotary"), "positional"),
        (lambda: _config(dropout=1.5), "dropout"),
        (lambda: _config("decoder-only", target_vocab_size=5), "target_vocab_size"),
        (lambda: _config(output_head=False), "needs output_head=True"),
        (lambda: _config("encoder-only", output_head=False), "tie_embeddings=True needs"),
        (lambda: _config(pooler=True), "pooler"),
        (lambda: _config(pad_id=VOCAB), "pad_id"),
        (lambda: EncoderOnly(_config()), "kind='encoder-only'"),
        (lambda: DecoderOnly(_config()), "kind='decoder-only'"),
        (lambda: EncoderDecoder(_config("decoder-only")), "kind='encoder-decoder'"),
        (lambda: _model("decoder-only")(torch.ones(2, 41, dtype=torch.long)), "max_length=40"),
        (lambda: _model("decoder-only")(torch.full((1, 3), VOCAB)), "outside the vocabulary"),
        (lambda: _model("decoder-only")(torch.ones(3, dtype=torch.long)), r"\(B, T\)"),
        (lambda: _model("decoder-only")(torch.ones(1, 3)), "integer tensor"),
        (lambda: _model("decoder-only")(torch.ones(1, 0, dtype=torch.long)), "empty"),
        (
            lambda: _model("encoder-only")(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 4)),
            "shape of the IDs",
        ),
        (
            lambda: _model("encoder-only")(
                torch.ones(1, 3, dtype=torch.long), torch.tensor([[1, 2, 0]])
            ),
            "only 0 and 1",
        ),
        (
            lambda: _model("encoder-only")(
                torch.ones(1, 3, dtype=torch.long), token_types=torch.zeros(1, 3)
            ),
            "type_vocab_size=0",
        ),
        (lambda: EncoderLayer(_config())(torch.ones(2, 3, 16), torch.ones(3, 3)), "boolean"),
        (
            lambda: EncoderLayer(_config())(torch.ones(2, 3, 16), torch.ones(2, 4, 4, dtype=bool)),
            "does not broadcast",
        ),
        (lambda: DecoderLayer(_config())(torch.ones(1, 2, 16)), "memory"),
        (lambda: count_parameters("gpt2"), "TransformerConfig"),
    ],
)
def test_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
