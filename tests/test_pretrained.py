"""Tests for transformer_tutorial.model.checkpoint: a real checkpoint in the book's own encoder.

The references are Hugging Face's ``transformers.BertModel`` (eager attention, so that it
returns its weights) and ``sentence_transformers.SentenceTransformer``, both loaded from the
same directory with local files only. Everything runs offline: ``HF_HUB_OFFLINE=1`` is set
before either library is imported. Neither emits a warning here (pytest turns warnings into
errors), so no warning is filtered.
"""

import json
import os
import shutil

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers / sentence_transformers are imported

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from transformer_tutorial.model.checkpoint import (
    MODEL_NAME,
    SentencePipeline,
    config_from_checkpoint,
    load_pretrained,
    parameter_name,
    sentence_pipeline,
)
from transformer_tutorial.model.files import MODEL_FILES, ModelFilesError
from transformer_tutorial.model.tokens import ordinary_token_ids
from transformer_tutorial.studies.real_model import (
    FRUIT_ANCHORS,
    HEAD_ROLES,
    SENSE_SENTENCES,
    TECHNOLOGY_ANCHORS,
    anchor_points,
    attention_locality,
    attention_record,
    compare_with_reference,
    diagonal_count,
    group_similarity,
    head_roles,
    sense_separation,
    shift_record,
)
from transformer_tutorial.views import explorers

ATOL = 1e-5  # float32 through 6 layers: the largest difference seen is about 6e-6

SENTENCES = [
    "The cat sat on the mat because it was tired",
    "I ate an apple and a banana for lunch",
    "Apple released a new iPhone.",
    "Tokenization splits unbelievably rare words, like antidisestablishmentarianism!",
    "Hi",
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One thread, as the notebooks run: steadier on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def encoder():
    return load_pretrained()


@pytest.fixture(scope="module")
def transformers_module():
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.disable_progress_bar()  # its "Loading weights" bar
    return transformers


@pytest.fixture(scope="module")
def reference(encoder, transformers_module):
    model = transformers_module.BertModel.from_pretrained(
        encoder.directory, attn_implementation="eager", local_files_only=True
    )
    return model.eval()


@pytest.fixture(scope="module")
def sentence_model(encoder, transformers_module):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    return sentence_transformers.SentenceTransformer(
        str(encoder.directory), device="cpu", local_files_only=True
    )


def _compare(encoder, reference, ids, mask):
    """Run both models on IDs ``(B, T)`` and padding mask ``(B, T)``; assert the last hidden
    states and every layer's weights agree at every real query position within ATOL.
    Returns both outputs for further checks."""
    comparison = compare_with_reference(encoder, reference, ids, mask)
    assert len(comparison.ours.self_attention) == encoder.config.num_layers
    assert comparison.hidden_gap <= ATOL, f"final vectors differ by {comparison.hidden_gap}"
    assert comparison.weight_gap <= ATOL, f"attention weights differ by {comparison.weight_gap}"
    return comparison.ours, comparison.theirs


def test_the_comparison_sees_a_changed_weight_and_a_nan(encoder, transformers_module):
    altered = transformers_module.BertModel.from_pretrained(
        encoder.directory, attn_implementation="eager", local_files_only=True
    ).eval()
    ids, mask = _batch([[101, 1996, 4937, 102], [101, 7592, 102]])  # [CLS] the cat [SEP], ...
    with torch.no_grad():
        altered.encoder.layer[5].output.dense.bias[0] += 1e-3  # after the last attention
    comparison = compare_with_reference(encoder, altered, ids, mask)
    assert comparison.hidden_gap > ATOL and comparison.weight_gap <= ATOL
    assert (comparison.tokens, comparison.weights) == (7, 6 * 12 * 7 * 4)
    with torch.no_grad():
        altered.encoder.layer[0].attention.self.query.bias[0] = float("nan")
    comparison = compare_with_reference(encoder, altered, ids, mask)
    assert not comparison.weight_gap <= ATOL and not comparison.hidden_gap <= ATOL


def _batch(sequences):
    """Token-ID lists of different lengths -> right-padded IDs and mask ``(B, T)``."""
    length = max(len(sequence) for sequence in sequences)
    ids = torch.zeros(len(sequences), length, dtype=torch.int64)  # [PAD] is 0
    mask = torch.zeros(len(sequences), length, dtype=torch.int64)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence)
        mask[row, : len(sequence)] = 1
    return ids, mask


# --- the checkpoint in the book's model -------------------------------------------------------


def test_the_config_is_all_minilm_l6_v2(encoder):
    config = encoder.config
    expected = {
        "kind": "encoder-only", "num_layers": 6, "num_heads": 12, "d_model": 384, "d_ff": 1536,
        "activation": "gelu", "vocab_size": 30522, "max_length": 512, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "norm_first": False, "embedding_norm": True,
        "positional": "learned", "scale_embeddings": False, "output_head": False,
        "pooler": True, "pad_id": 0, "dropout": 0.0,
    }  # fmt: skip
    assert {name: getattr(config, name) for name in expected} == expected
    assert encoder.name == MODEL_NAME
    assert not encoder.model.training
    assert repr(encoder).startswith("PretrainedEncoder('all-MiniLM-L6-v2': 6 layers, 12 heads")


def test_every_stored_tensor_is_used_once(encoder):
    stored = load_file(encoder.directory / "model.safetensors")
    ours = dict(encoder.model.named_parameters())
    names = {key: parameter_name(key) for key in stored}
    assert names["embeddings.position_ids"] is None  # an index table, not a parameter
    used = {name: key for key, name in names.items() if name is not None}
    assert len(used) == len(stored) - 1 == len(ours) == 103
    for name, key in used.items():
        torch.testing.assert_close(ours[name], stored[key], atol=0, rtol=0)


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("embeddings.word_embeddings.weight", "encoder.embeddings.token.weight"),
        ("embeddings.LayerNorm.weight", "encoder.embeddings.norm.gain"),
        ("encoder.layer.0.attention.self.query.bias", "encoder.layers.0.self_attention.W_Q.bias"),
        ("encoder.layer.5.attention.output.dense.weight",
         "encoder.layers.5.self_attention.W_O.weight"),
        ("encoder.layer.2.attention.output.LayerNorm.weight",
         "encoder.layers.2.self_attention_block.norm.gain"),
        ("encoder.layer.3.intermediate.dense.weight", "encoder.layers.3.feed_forward.W_1.weight"),
        ("encoder.layer.3.output.dense.bias", "encoder.layers.3.feed_forward.W_2.bias"),
        ("encoder.layer.4.output.LayerNorm.bias", "encoder.layers.4.feed_forward_block.norm.bias"),
        ("bert.encoder.layer.1.output.LayerNorm.gamma",
         "encoder.layers.1.feed_forward_block.norm.gain"),
        ("pooler.dense.weight", "pooler.weight"),
        ("bert.embeddings.position_ids", None),
    ],
)  # fmt: skip
def test_parameter_names(key, name):
    assert parameter_name(key) == name


@pytest.mark.parametrize(
    "key", ["cls.predictions.bias", "encoder.layer.0.crossattention.self.query.weight",
            "encoder.layer.0.attention.self.query.gamma"],
)  # fmt: skip
def test_unknown_tensors_are_refused(key):
    with pytest.raises(ValueError, match=r"has no place|belongs to a LayerNorm"):
        parameter_name(key)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "gpt2"}, "model_type='gpt2'"),
        ({"position_embedding_type": "relative_key"}, "absolute positions only"),
        ({"hidden_act": "swish"}, "hidden_act='swish'"),
        ({"is_decoder": True}, "decoder"),
        ({"hidden_size": None}, "lacks hidden_size"),
    ],
)
def test_config_errors(encoder, change, message):
    checkpoint = json.loads((encoder.directory / "config.json").read_text())
    for name, value in change.items():
        if value is None:
            del checkpoint[name]
        else:
            checkpoint[name] = value
    with pytest.raises(ValueError, match=message):
        config_from_checkpoint(checkpoint)


# --- against transformers.BertModel -----------------------------------------------------------


@pytest.mark.parametrize("sentence", SENTENCES)
def test_single_sentences_match_bert_model(encoder, reference, sentence):
    batch = encoder.encode([sentence])
    _compare(encoder, reference, batch.ids, batch.attention_mask)


def test_our_token_ids_are_the_reference_tokenizers(encoder, transformers_module):
    tokenizer = transformers_module.AutoTokenizer.from_pretrained(
        encoder.directory, local_files_only=True
    )
    batch = encoder.encode(SENTENCES)
    theirs = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    torch.testing.assert_close(batch.ids, theirs["input_ids"], atol=0, rtol=0)
    torch.testing.assert_close(batch.attention_mask, theirs["attention_mask"], atol=0, rtol=0)


def test_a_padded_batch_matches_and_padding_changes_nothing(encoder, reference):
    batch = encoder.encode(SENTENCES)
    assert len(set(batch.lengths)) == len(SENTENCES)  # every sentence a different length
    ours, _ = _compare(encoder, reference, batch.ids, batch.attention_mask)
    run = encoder.forward(batch)
    for index, sentence in enumerate(SENTENCES):
        alone = encoder.forward([sentence])
        torch.testing.assert_close(run.hidden(index), alone.hidden(0), atol=ATOL, rtol=0)
        np.testing.assert_allclose(run.weights(index), alone.weights(0), atol=ATOL, rtol=0)
        assert (
            run.tokens(index)
            == alone.tokens(0)
            == list(batch.tokens[index][: len(alone.tokens(0))])
        )
    # Padded keys get exactly zero weight from every query, real or padded.
    padded_keys = ~batch.attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
    for weights in ours.self_attention:
        assert (weights.masked_select(padded_keys.expand_as(weights)) == 0).all()
        # Padded *query* rows are computed like the others (their output is ignored): they
        # attend to the real tokens only, so they are finite and still sum to 1.
        assert torch.isfinite(weights).all()
        torch.testing.assert_close(weights.sum(dim=-1), torch.ones(weights.shape[:-1]))


@pytest.mark.parametrize("seed", range(3))
def test_random_token_ids_of_random_lengths_match(encoder, reference, seed):
    generator = torch.Generator().manual_seed(seed)
    pool = torch.tensor(ordinary_token_ids(encoder.tokenizer))
    cls_id, sep_id = encoder.tokenizer.token_to_id("[CLS]"), encoder.tokenizer.token_to_id("[SEP]")
    lengths = torch.randint(1, 64, (4,), generator=generator).tolist()
    sequences = [
        [cls_id, *pool[torch.randint(len(pool), (length,), generator=generator)].tolist(), sep_id]
        for length in lengths
    ]
    _compare(encoder, reference, *_batch(sequences))


@pytest.mark.parametrize("seed", range(2))
def test_random_word_sequences_match(encoder, reference, seed):
    rng = np.random.default_rng(seed)
    words = [token for token in encoder.tokenizer.get_vocab() if token.isalpha()]
    words.sort()  # the vocabulary's dict order is not guaranteed
    texts = [" ".join(rng.choice(words, size=rng.integers(1, 40))) for _ in range(3)]
    batch = encoder.encode(texts)
    _compare(encoder, reference, batch.ids, batch.attention_mask)


def test_inputs_at_the_position_limit_match(encoder, reference):
    generator = torch.Generator().manual_seed(7)
    pool = torch.tensor(ordinary_token_ids(encoder.tokenizer))
    body = pool[torch.randint(len(pool), (510,), generator=generator)].tolist()
    longest = [101, *body, 102]  # 512 tokens: every position the model has
    assert len(longest) == encoder.config.max_length
    _compare(encoder, reference, *_batch([longest, [*longest[:30], 102]]))  # and 481 [PAD]


def test_the_pooler_matches(encoder, reference):
    batch = encoder.encode(SENTENCES[:3])
    with torch.inference_mode():
        ours = encoder.model(batch.ids, padding_mask=batch.attention_mask).pooled
        theirs = reference(input_ids=batch.ids, attention_mask=batch.attention_mask).pooler_output
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


# --- against sentence-transformers ------------------------------------------------------------


def test_sentence_pipeline_is_read_from_the_directory(encoder):
    assert encoder.pipeline == SentencePipeline(pooling="mean", normalize=True, max_seq_length=256)


def test_sentence_embeddings_match_sentence_transformers(encoder, sentence_model):
    rng = np.random.default_rng(3)
    words = sorted(token for token in encoder.tokenizer.get_vocab() if token.isalpha())
    long_text = " ".join(rng.choice(words, size=300))  # over 256 tokens: cut, as the pipeline does
    texts = [*SENTENCES, long_text]
    ours = encoder.sentence_embeddings(texts)
    theirs = sentence_model.encode(texts, convert_to_tensor=True)
    assert ours.shape == (len(texts), 384)
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)
    torch.testing.assert_close(ours.norm(dim=1), torch.ones(len(texts)))


def test_sentence_embeddings_are_the_mean_of_the_real_tokens(encoder):
    run = encoder.forward(SENTENCES[:2], need_weights=False)
    means = torch.stack([run.hidden(i)[-1].mean(dim=0) for i in range(2)])  # (2, D)
    expected = torch.nn.functional.normalize(means, dim=-1)
    torch.testing.assert_close(encoder.sentence_embeddings(SENTENCES[:2]), expected)


# --- another BERT-style checkpoint ------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_checkpoint(encoder, transformers_module, tmp_path_factory):
    """A small random BERT (2 layers, width 32, 4 heads, tanh-GELU, no pooler) saved by
    transformers, with the real tokenizer: any checkpoint in this format must load."""
    config = transformers_module.BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=40, hidden_act="gelu_new",
        layer_norm_eps=1e-7,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = transformers_module.BertModel(config, add_pooling_layer=False)
    path = tmp_path_factory.mktemp("tiny-bert")
    model.save_pretrained(path)
    for name in ("tokenizer.json", "vocab.txt"):
        shutil.copy(encoder.directory / name, path / name)
    reference = transformers_module.BertModel.from_pretrained(
        path, attn_implementation="eager", local_files_only=True
    )
    return path, reference.eval()


def test_another_bert_checkpoint_loads_and_matches(tiny_checkpoint):
    path, reference = tiny_checkpoint
    tiny = load_pretrained(path)
    assert (tiny.config.num_layers, tiny.config.d_model, tiny.config.num_heads) == (2, 32, 4)
    assert tiny.config.activation == "gelu_tanh" and not tiny.config.pooler
    assert tiny.name == path.name
    assert tiny.pipeline == SentencePipeline()  # no modules.json: plain mean pooling
    batch = tiny.encode(SENTENCES[:3])
    _compare(tiny, reference, batch.ids, batch.attention_mask)
    with pytest.raises(ValueError, match="more than the model's 40 positions"):
        tiny.encode(["word " * 39])


def test_a_checkpoint_missing_a_tensor_is_refused(tiny_checkpoint, tmp_path):
    path, _ = tiny_checkpoint
    for name in ("config.json", "tokenizer.json", "vocab.txt"):
        shutil.copy(path / name, tmp_path / name)
    stored = load_file(path / "model.safetensors")
    del stored["encoder.layer.1.output.dense.weight"]
    save_file(stored, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"lacks encoder\.layers\.1\.feed_forward\.W_2\.weight"):
        load_pretrained(tmp_path)


def test_a_checkpoint_with_a_wrong_shape_is_refused(tiny_checkpoint, tmp_path):
    path, _ = tiny_checkpoint
    for name in ("tokenizer.json", "vocab.txt", "model.safetensors"):
        shutil.copy(path / name, tmp_path / name)
    config = json.loads((path / "config.json").read_text())
    config["intermediate_size"] = 64
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        ValueError, match=r"wrong shape .*W_1\.weight \(48, 32\) \(expected \(64, 32\)\)"
    ):
        load_pretrained(tmp_path)


# --- clear errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("missing", MODEL_FILES)
def test_a_directory_missing_a_file_is_named(encoder, tmp_path, missing):
    for name in MODEL_FILES:
        if name != missing:
            (tmp_path / name).symlink_to(encoder.directory / name)
    with pytest.raises(ModelFilesError, match=f"missing {missing}") as error:
        load_pretrained(tmp_path)
    assert error.value.missing == (missing,)
    assert isinstance(error.value, FileNotFoundError)


def test_texts_over_the_position_limit_are_refused(encoder):
    too_long = "word " * 511  # 511 words + [CLS] + [SEP] = 513 tokens
    assert len(encoder.tokenizer.encode(too_long).ids) == 513
    with pytest.raises(ValueError, match=r"texts\[1\] has 513 tokens .* model's 512 positions"):
        encoder.encode(["fine", too_long])
    with pytest.raises(ValueError, match="512 positions"):
        encoder.forward([too_long])
    assert len(encoder.encode(["word " * 510]).tokens[0]) == 512  # the limit itself is fine
    ids = torch.ones(1, 513, dtype=torch.int64)
    with pytest.raises(ValueError, match="more than the model's max_length=512"):
        encoder.model(ids)


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_empty_texts_are_refused(encoder, text):
    with pytest.raises(ValueError, match="empty"):
        encoder.forward(["a sentence", text])
    with pytest.raises(ValueError, match="empty"):
        encoder.sentence_embeddings([text])
    with pytest.raises(ValueError, match="empty"):
        attention_record(encoder, text)


def test_texts_must_be_a_list(encoder):
    with pytest.raises(ValueError, match="wrap it in a list"):
        encoder.forward("one sentence")
    with pytest.raises(ValueError, match="texts is empty"):
        encoder.forward([])


def test_pooling_other_than_mean_is_refused(encoder, tmp_path):
    shutil.copytree(encoder.directory / "1_Pooling", tmp_path / "1_Pooling")
    shutil.copy(encoder.directory / "modules.json", tmp_path / "modules.json")
    settings = json.loads((tmp_path / "1_Pooling" / "config.json").read_text())
    settings.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match=r"pooling \['cls'\] .* only mean pooling"):
        sentence_pipeline(tmp_path)


# --- what a run gives back --------------------------------------------------------------------


def test_a_run_gives_every_layer(encoder):
    run = encoder.forward(SENTENCES[:2])
    assert len(run.hidden_states) == 7 and len(run.attention) == 6
    tokens = run.tokens(0)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "[PAD]" not in tokens
    assert run.hidden(0).shape == (7, len(tokens), 384)
    weights = run.weights(0)
    assert weights.shape == (6, 12, len(tokens), len(tokens)) and weights.dtype == np.float64
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
    assert run.tokens(-1) == run.tokens(1)
    with pytest.raises(ValueError, match=r"index must be an int in -2\.\.1"):
        run.hidden(2)
    without = encoder.forward(SENTENCES[:2], need_weights=False)
    assert without.attention == []
    torch.testing.assert_close(without.hidden_states[-1], run.hidden_states[-1], atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="need_weights=True"):
        without.weights(0)


def test_attention_record_for_the_explorer(encoder):
    record = attention_record(encoder, SENTENCES[0], label="it -> cat")
    assert record.label == "it -> cat" and record.model == MODEL_NAME
    assert record.tokens[:3] == ["[CLS]", "the", "cat"]
    assert np.shape(record.weights) == (6, 12, 12, 12)
    assert explorers.attention_explorer_data([record])["weights"]  # accepted by the explorer


def test_word_positions_find_every_piece_and_occurrence(encoder):
    sentence = "Tokenization of the tokenization"
    tokens = encoder.forward([sentence]).tokens(0)
    first = encoder.word_positions(sentence, "tokenization")
    second = encoder.word_positions(sentence, "Tokenization", occurrence=1)
    assert [tokens[i] for i in first] == ["token", "##ization"] == [tokens[i] for i in second]
    assert first == [1, 2] and second == [5, 6]
    with pytest.raises(ValueError, match="occurs 2 time"):
        encoder.word_positions(sentence, "tokenization", occurrence=2)
    with pytest.raises(ValueError, match="must be one word"):
        encoder.word_positions(sentence, "of the")


def test_attention_between_reads_the_weights(encoder):
    sentence = SENTENCES[0]
    between, tokens = encoder.attention_between(sentence, "it", ["cat", "mat"])
    weights = encoder.forward([sentence]).weights(0)
    it, cat, mat = (tokens.index(word) for word in ("it", "cat", "mat"))
    assert between.shape == (6, 12, 2)
    np.testing.assert_array_equal(between[..., 0], weights[:, :, it, cat])
    np.testing.assert_array_equal(between[..., 1], weights[:, :, it, mat])
    pieces, tokens = encoder.attention_between("tokenization is fun", "fun", ["tokenization"])
    assert tokens == ["[CLS]", "token", "##ization", "is", "fun", "[SEP]"]
    row = encoder.forward(["tokenization is fun"]).weights(0)[:, :, 4]  # "fun" (L, H, T)
    np.testing.assert_allclose(pieces[..., 0], row[..., 1] + row[..., 2])  # both pieces
    with pytest.raises(ValueError, match="keys must be a non-empty sequence"):
        encoder.attention_between(sentence, "it", "cat")


def test_word_vectors_follow_the_layers(encoder):
    vectors = encoder.word_vectors(SENTENCES[1], "apple")
    run = encoder.forward([SENTENCES[1]], need_weights=False)
    position = run.tokens(0).index("apple")
    torch.testing.assert_close(vectors, run.hidden(0)[:, position])
    assert vectors.shape == (7, 384)


# --- measurements -----------------------------------------------------------------------------


def _record(label, tokens, weights):
    return explorers.AttentionRecord(label, tokens, np.asarray(weights, dtype=float))


def test_diagonal_count_by_hand():
    tokens = ["[CLS]", "a", "b", "[SEP]"]
    on_self = np.eye(4)[None, None]  # (1, 1, 4, 4): every row on itself
    on_cls = np.tile([1.0, 0, 0, 0], (4, 1))[None, None]  # every row on [CLS]
    uniform = np.full((1, 1, 4, 4), 0.25)  # ties everywhere: never strictly on itself
    weights = np.concatenate([on_self, on_cls, uniform], axis=1)  # (1, 3, 4, 4)
    count = diagonal_count([_record("s", tokens, weights)])
    assert count.rows == 12
    assert count.on_self == 4 + 1 + 0  # in the second head, [CLS] looks at itself
    assert count.on_special == 2 + 4 + 4  # [CLS] and [SEP] rows; all of head 2; ties -> [CLS]
    assert count.chance == pytest.approx(0.25)
    np.testing.assert_allclose(count.head_shares, [[1.0, 0.25, 0.0]])
    assert count.self_share == pytest.approx(5 / 12)
    assert count.special_share == pytest.approx(10 / 12)
    assert count.on_both == 2 + 1  # head 1: [CLS] and [SEP] on themselves; head 2: [CLS]
    assert count.both_share == pytest.approx(3 / 12)
    assert count.word_rows == 3 * 2 and count.word_chance == pytest.approx(0.25)
    assert count.word_self_share == pytest.approx(2 / 6)  # a and b in the first head only
    # among the word pieces alone: head 1 on itself (2 rows); head 2 gives a and b 0 each, a tie;
    # head 3 ties too. The chance is 1 in 2 word pieces.
    assert count.among_pieces == 2 and count.among_pieces_share == pytest.approx(2 / 6)
    assert count.among_pieces_chance == pytest.approx(0.5)
    sinks = np.array([
        [0.1, 0.6, 0.2, 0.1],  # [CLS] looks at a
        [0.5, 0.2, 0.1, 0.2],  # a: [CLS] first, but among a and b, a itself
        [0.1, 0.3, 0.2, 0.4],  # b: [SEP] first, and among a and b, a
        [0.4, 0.3, 0.2, 0.1],  # [SEP] looks at [CLS]
    ])[None, None]  # fmt: skip
    on_sinks = diagonal_count([_record("sinks", tokens, sinks)])
    assert on_sinks.on_self == 0  # no row's largest weight is on its own token
    assert on_sinks.among_pieces == 1 and on_sinks.among_pieces_share == pytest.approx(1 / 2)
    two = diagonal_count(
        [
            _record("s", tokens, weights),
            _record("t", tokens[:2], np.eye(2)[None, None].repeat(3, 1)),
        ]
    )
    assert two.rows == 18 and two.on_self == 5 + 6
    assert two.chance == pytest.approx((12 * 0.25 + 6 * 0.5) / 18)


def test_diagonal_count_refuses_bad_input():
    with pytest.raises(ValueError, match="records is empty"):
        diagonal_count([])
    with pytest.raises(ValueError, match="count one model at a time"):
        diagonal_count([
            _record("a", ["x", "y"], np.full((1, 2, 2, 2), 0.5)),
            _record("b", ["x", "y"], np.full((2, 2, 2, 2), 0.5)),
        ])  # fmt: skip


def test_diagonal_count_on_the_real_model(encoder):
    count = diagonal_count([attention_record(encoder, sentence) for sentence in SENTENCES[:3]])
    assert count.head_shares.shape == (6, 12)
    assert count.rows == 6 * 12 * sum(len(encoder.encode([s]).tokens[0]) for s in SENTENCES[:3])
    assert count.self_share < 0.5 < count.special_share  # the claim fails; [CLS]/[SEP] win
    assert count.word_self_share < count.word_chance  # word pieces favour themselves rarely
    assert count.word_self_share < count.among_pieces_share  # without the sinks, more often
    assert 0 < count.among_pieces_chance < 1


def test_group_similarity_by_hand():
    vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # (L + 1, D) = (2, 2)
    anchors = {
        "x": torch.tensor([[1.0, 0.0], [1.0, 0.0]]),
        "y": torch.tensor([[1.0, 1.0], [0.0, 2.0]]),
    }
    similarity = group_similarity(vectors, anchors, {"first": ["x"], "both": ["x", "y"]})
    np.testing.assert_allclose(similarity["first"], [1.0, 0.0])
    np.testing.assert_allclose(similarity["both"], [(1 + 2**-0.5) / 2, (0 + 1) / 2])
    with pytest.raises(ValueError, match="no anchor vectors for"):
        group_similarity(vectors, anchors, {"g": ["z"]})
    with pytest.raises(ValueError, match="both must be"):
        group_similarity(vectors[:1], anchors, {"g": ["x"]})


def test_anchor_points_leave_the_word_itself_out():
    anchors = {
        "a": torch.tensor([[1.0, 0.0]]), "b": torch.tensor([[1.0, 1.0]]),
        "c": torch.tensor([[0.0, 1.0]]), "d": torch.tensor([[0.0, 2.0]]),
    }  # fmt: skip  # one layer, D = 2
    points = anchor_points(anchors, {"left": ["a", "b"], "right": ["c", "d"]})
    by_word = {point.word: point for point in points}
    assert [point.word for point in points] == ["a", "b", "c", "d"]
    assert by_word["a"].group == "left" and by_word["c"].group == "right"
    np.testing.assert_allclose(by_word["a"].point, (2**-0.5, 0.0))  # vs b; vs c and d
    np.testing.assert_allclose(by_word["b"].point, (2**-0.5, 2**-0.5))
    np.testing.assert_allclose(by_word["c"].point, (2**-0.5 / 2, 1.0))  # vs a and b; vs d
    with pytest.raises(ValueError, match="no word besides 'a'"):
        anchor_points(anchors, {"left": ["a"], "right": ["c"]})  # a's group is only a
    with pytest.raises(ValueError, match="exactly two groups"):
        anchor_points(anchors, {"left": ["a", "b"]})


def test_the_apple_shift_on_the_real_model(encoder):
    """The measurement chapter 10 shows: in a fruit sentence "apple" ends nearer the fruit
    words than the technology words, in a technology sentence the other way round."""
    words = [*FRUIT_ANCHORS, *TECHNOLOGY_ANCHORS]
    anchors = encoder.anchor_vectors(words)
    groups = {"fruit": FRUIT_ANCHORS, "technology": TECHNOLOGY_ANCHORS}
    fruit = shift_record(encoder, "I ate an apple and a banana for lunch", "apple", anchors, groups)
    tech = shift_record(
        encoder, "Apple released a new iPhone and a faster laptop", "apple", anchors, groups
    )
    for record in (fruit, tech):
        assert record.trajectory.shape == (7, 2)
        assert record.attention.sum() == pytest.approx(1.0)
        assert len(record.tokens) == len(record.attention)
    assert fruit.trajectory[-1, 0] > fruit.trajectory[-1, 1]  # nearer fruit
    assert tech.trajectory[-1, 1] > tech.trajectory[-1, 0]  # nearer technology
    points = anchor_points(anchors, groups)
    assert [point.word for point in points] == words
    explorers.apple_explorer_data([fruit, tech], points)  # accepted by the explorer
    with pytest.raises(ValueError, match="exactly two groups"):
        shift_record(encoder, "an apple", "apple", anchors, {"fruit": FRUIT_ANCHORS})
    with pytest.raises(ValueError, match="non-empty sequence of words"):
        encoder.anchor_vectors("fruit")


def test_head_roles_by_hand():
    tokens = ["[CLS]", "a", "b", "c", "[SEP]"]
    previous = np.eye(5, k=-1)  # row t on t - 1 (row 0 on nothing)
    previous[0, 0] = 1.0
    on_sep = np.zeros((5, 5))
    on_sep[:, 4] = 1.0
    weights = np.stack([previous, on_sep])[None]  # (1, 2, 5, 5)
    roles = head_roles([_record("s", tokens, weights)])
    assert list(roles) == list(HEAD_ROLES)
    # queries a, b, c; "previous" only where the neighbour is a piece: b and c
    np.testing.assert_allclose(roles["previous word piece"], [[1.0, 0.0]])
    np.testing.assert_allclose(roles["next word piece"], [[0.0, 0.0]])  # a -> b, b -> c
    np.testing.assert_allclose(roles["itself"], [[0.0, 0.0]])
    np.testing.assert_allclose(roles["[CLS]"], [[1 / 3, 0.0]])  # a's previous is [CLS]
    np.testing.assert_allclose(roles["[SEP]"], [[0.0, 1.0]])
    with pytest.raises(ValueError, match="no word piece"):
        head_roles([_record("s", ["[CLS]", "[SEP]"], np.full((1, 1, 2, 2), 0.5))])
    with pytest.raises(ValueError, match="records is empty"):
        head_roles([])


def test_the_real_model_has_a_previous_word_piece_head(encoder):
    roles = head_roles([attention_record(encoder, sentence) for sentence in SENTENCES[:4]])
    assert roles["previous word piece"][0, 2] > 0.95  # layer 1, head 3
    assert roles["[CLS]"].mean() > 0.4 > roles["itself"].max()


def test_attention_locality_by_hand():
    tokens = ["[CLS]", "a", "b", "c", "[SEP]"]
    previous = np.eye(5, k=-1)  # row t on t - 1: a on [CLS], b on a, c on b
    previous[0, 0] = 1.0
    even = np.zeros((5, 5))
    even[:, 1:4] = 1 / 3  # every row spread over the three pieces
    weights = np.stack([previous[None], even[None]])  # (L, H, T, T) = (2, 1, 5, 5)
    locality = attention_locality([_record("s", tokens, weights)])
    # layer 1: a's weight is all on [CLS]; b and c put theirs on the piece before
    np.testing.assert_allclose(locality["on [CLS] and [SEP]"], [1 / 3, 0.0])
    np.testing.assert_allclose(locality["adjacent"], [1.0, (1 + 2 + 1) / 9])
    np.testing.assert_allclose(locality["mean distance"], [1.0, (3 + 2 + 3) / 9])
    # spread evenly, b's row (two neighbours of three pieces) and c's (one of three) count in
    # layer 1, where a has no weight on pieces; every row counts in layer 2
    np.testing.assert_allclose(locality["adjacent (even)"], [(2 / 3 + 1 / 3) / 2, 4 / 9])
    np.testing.assert_allclose(locality["mean distance (even)"], [(2 / 3 + 1) / 2, 8 / 9])
    np.testing.assert_allclose(locality["adjacent"][1], locality["adjacent (even)"][1])
    with pytest.raises(ValueError, match="records is empty"):
        attention_locality([])
    with pytest.raises(ValueError, match="no word piece"):
        attention_locality([_record("s", ["[CLS]", "[SEP]"], np.full((1, 1, 2, 2), 0.5))])
    with pytest.raises(ValueError, match="has 1 layers, the first 2"):
        attention_locality([_record("s", tokens, weights), _record("t", tokens, weights[:1])])


def test_attention_locality_on_the_real_model(encoder):
    """The middle of chapter 10's finding: the second layer looks at neighbours about twice
    as often as an even spread would, the last layer no more than an even spread."""
    locality = attention_locality([attention_record(encoder, s) for s in SENTENCES[:4]])
    assert all(value.shape == (6,) for value in locality.values())
    assert locality["adjacent"][1] > 1.5 * locality["adjacent (even)"][1]
    assert locality["mean distance"][1] < locality["mean distance (even)"][1]
    assert locality["adjacent"][1] > locality["adjacent"][5]


def test_sense_separation_by_hand():
    def layers(*rows):  # one vector per layer: (L + 1, D)
        return torch.tensor(rows, dtype=torch.float32)

    vectors = {
        "x": [layers([1.0, 0.0], [1.0, 0.0]), layers([1.0, 0.0], [2.0, 0.0])],
        "y": [layers([1.0, 0.0], [0.0, 1.0]), layers([1.0, 0.0], [1.0, 1.0])],
    }  # layer 0: all the same; layer 1: x along the first axis, y apart
    result = sense_separation(vectors)
    np.testing.assert_allclose(result["same sense"], [1.0, (1 + 2**-0.5) / 2])
    np.testing.assert_allclose(result["other sense"], [1.0, (0 + 2**-0.5) / 2])
    np.testing.assert_allclose(result["separation"], [0.0, 0.5])
    # layer 0: ties everywhere, so no sentence is strictly nearer its own sense
    np.testing.assert_allclose(result["nearest sense"], [0.0, 0.75])  # y1: 1/sqrt2 vs 1/sqrt2
    with pytest.raises(ValueError, match="at least two senses"):
        sense_separation({"x": vectors["x"]})
    with pytest.raises(ValueError, match="at least two sentences"):
        sense_separation({"x": vectors["x"], "y": vectors["y"][:1]})
    with pytest.raises(ValueError, match="same shape"):
        sense_separation({"x": vectors["x"], "y": [vectors["y"][0], torch.ones(3, 2)]})


def test_sense_separation_on_the_real_model(encoder):
    """Chapter 10's measurement: from the first layer on, "bank" in river sentences is nearer
    the other river sentences than the money ones; before any attention (row 0) its vector
    differs only by position."""
    senses = SENSE_SENTENCES["bank"]
    vectors = {
        sense: [encoder.word_vectors(s, "bank") for s in group] for sense, group in senses.items()
    }
    result = sense_separation(vectors)
    assert all(value.shape == (7,) for value in result.values())
    assert abs(result["separation"][0]) < 0.02
    assert (result["separation"][1:] > 0.05).all()
    np.testing.assert_array_equal(result["nearest sense"][1:], 1.0)
