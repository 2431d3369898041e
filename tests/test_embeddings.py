"""Tests for transformer_tutorial.model.tokens: the real model's files, tokenization and padding,
the embedding lookup three ways, positions, similarities, BPE and WordPiece, and learning."""

import json
import math
import re
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from transformer_tutorial.model import embeddings, files
from transformer_tutorial.model import tokens as token_code
from transformer_tutorial.model.positions import sinusoidal_encoding
from transformer_tutorial.studies import word_vectors

# A paragraph with subwords, punctuation, accents and capitals, for WordPiece against the library
PARAGRAPH = (
    "Tokenization splits unbelievably rare words, like antidisestablishmentarianism, into "
    "pieces; ChatGPT, Kathmandu and naïve cafés too. The Transformer's embeddings (d_model=384) "
    "are learned: 30,522 rows!"
)


@pytest.fixture(scope="module")
def directory():
    return files.model_directory()


@pytest.fixture(scope="module")
def tokenizer(directory):
    return token_code.load_tokenizer(directory)


@pytest.fixture(scope="module")
def table(directory):
    return embeddings.load_word_embeddings(directory)


def _fake_model_directory(path, names):
    path.mkdir(exist_ok=True)
    for name in names:
        (path / name).write_text("{}")
    return path


# --- the model's files ------------------------------------------------------------------------


def test_model_files_are_the_four_the_book_reads():
    assert files.MODEL_FILES == ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")


def test_installed_model_directory_holds_every_file(directory):
    assert directory.name == "model" and directory.parent.name == files.MODEL_PACKAGE
    assert all((directory / name).is_file() for name in files.MODEL_FILES)


def test_model_directory_does_not_import_the_package():
    code = (
        "import sys; from transformer_tutorial.model.files import model_directory, MODEL_PACKAGE;"
        "model_directory(); assert MODEL_PACKAGE not in sys.modules, 'imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("as_str", [False, True])
def test_model_directory_accepts_a_complete_directory(tmp_path, as_str):
    path = _fake_model_directory(tmp_path / "copy", files.MODEL_FILES)
    assert files.model_directory(str(path) if as_str else path) == path


def test_model_directory_names_every_missing_file_and_the_directory(tmp_path):
    path = _fake_model_directory(tmp_path / "partial", ("config.json", "vocab.txt"))
    with pytest.raises(files.ModelFilesError) as caught:
        files.model_directory(path)
    assert isinstance(caught.value, FileNotFoundError)
    message = str(caught.value)
    assert str(path) in message
    assert "missing model.safetensors, tokenizer.json" in message
    assert caught.value.missing == ("model.safetensors", "tokenizer.json")
    assert caught.value.directory == path


def test_model_directory_rejects_a_missing_directory_and_a_file(tmp_path):
    with pytest.raises(files.ModelFilesError, match="does not exist") as caught:
        files.model_directory(tmp_path / "nowhere")
    assert caught.value.missing == files.MODEL_FILES
    a_file = tmp_path / "config.json"
    a_file.write_text("{}")
    with pytest.raises(files.ModelFilesError, match="is not a directory"):
        files.model_directory(a_file)


def test_model_directory_says_when_the_package_is_not_installed(monkeypatch):
    monkeypatch.setattr(files, "MODEL_PACKAGE", "no_such_package_for_this_test")
    with pytest.raises(
        files.ModelFilesError, match="is not installed and no model directory"
    ) as caught:
        files.model_directory()
    assert caught.value.directory is None
    assert isinstance(caught.value, FileNotFoundError)


def test_config_matches_the_table(directory, table):
    config = files.load_config(directory)
    assert (config["vocab_size"], config["hidden_size"]) == (30522, 384)
    assert table.shape == (config["vocab_size"], config["hidden_size"])
    assert table.dtype == torch.float32


def test_word_embeddings_match_an_independent_reading_of_the_file(directory, table):
    # safetensors' layout: 8-byte little-endian header length, a JSON header, then raw data.
    with open(directory / "model.safetensors", "rb") as file:
        (header_length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(header_length))
        entry = header[embeddings.WORD_EMBEDDINGS_KEY]
        start, end = entry["data_offsets"]
        file.seek(8 + header_length + start)
        raw = np.frombuffer(file.read(end - start), dtype="<f4").reshape(entry["shape"])
    assert entry["dtype"] == "F32"
    assert torch.equal(table, torch.from_numpy(raw.copy()))


@pytest.mark.parametrize(
    ("load", "key", "shape"),
    [
        ("load_word_embeddings", "WORD_EMBEDDINGS_KEY", r"\(vocab, D\)"),
        ("load_position_embeddings", "POSITION_EMBEDDINGS_KEY", r"\(max_len, D\)"),
    ],
)
def test_embedding_tables_need_their_key(tmp_path, load, key, shape):
    load, key = getattr(embeddings, load), getattr(embeddings, key)
    save_file({"something.else": torch.zeros(2, 3)}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=f"holds no tensor {re.escape(repr(key))}"):
        load(tmp_path)
    save_file({key: torch.zeros(6)}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=rf"must have shape {shape}, got \(6,\)"):
        load(tmp_path)


@pytest.mark.parametrize(
    ("loader", "needed"),
    [
        (embeddings.load_word_embeddings, "model.safetensors"),
        (token_code.load_tokenizer, "tokenizer.json"),
        (token_code.load_vocabulary, "vocab.txt"),
        (files.load_config, "config.json"),
        (files.stored_parameter_shapes, "model.safetensors"),
    ],
)
def test_every_loader_names_its_missing_file(tmp_path, loader, needed):
    with pytest.raises(files.ModelFilesError, match=f"missing {needed}"):
        loader(tmp_path)


def test_stored_parameters_count_the_whole_model(directory, table):
    shapes = files.stored_parameter_shapes(directory)
    assert shapes[embeddings.WORD_EMBEDDINGS_KEY] == tuple(table.shape)
    assert "embeddings.position_ids" not in shapes  # an integer buffer, not a parameter
    assert shapes["embeddings.position_embeddings.weight"] == (512, 384)
    assert sum(math.prod(shape) for shape in shapes.values()) == 22_713_216


def test_vocabulary_file_and_tokenizer_agree(directory, tokenizer):
    vocabulary = token_code.load_vocabulary(directory)
    assert len(vocabulary) == tokenizer.get_vocab_size() == 30522
    assert {token: i for i, token in enumerate(vocabulary)} == tokenizer.get_vocab()
    assert vocabulary[0] == "[PAD]" and vocabulary[100:103] == ["[UNK]", "[CLS]", "[SEP]"]


# --- tokenization -----------------------------------------------------------------------------


def test_tokenizer_file_settings_are_switched_off(tokenizer):
    assert tokenizer.truncation is None and tokenizer.padding is None
    long_text = " ".join(["word"] * 300)
    assert len(token_code.tokenize(tokenizer, long_text).ids) == 302  # not cut at 128, nor padded


def test_known_tokenization(tokenizer):
    tokens = token_code.tokenize(tokenizer, "How are you")
    assert tokens.tokens == ("[CLS]", "how", "are", "you", "[SEP]")
    assert tokens.ids == (101, 2129, 2024, 2017, 102)
    assert tokens.words == (None, 0, 1, 2, None)


def test_words_split_into_pieces_marked_with_hashes(tokenizer):
    tokens = token_code.tokenize(tokenizer, "Tokenization is unbelievably easy")
    assert tokens.tokens[1:-1] == (
        "token", "##ization", "is", "un", "##bel", "##ie", "##va", "##bly", "easy",
    )  # fmt: skip
    assert tokens.words[1:-1] == (0, 0, 1, 2, 2, 2, 2, 2, 3)


def test_special_token_ids(tokenizer):
    assert [tokenizer.token_to_id(token) for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]")] == [
        0, 100, 101, 102,
    ]  # fmt: skip
    assert token_code.tokenize(tokenizer, "hello 🙂").tokens == ("[CLS]", "hello", "[UNK]", "[SEP]")


@pytest.mark.parametrize("text", ["", "   \n", None, 42])
def test_tokenize_rejects_empty_or_non_text(tokenizer, text):
    with pytest.raises(ValueError, match="text"):
        token_code.tokenize(tokenizer, text)


def test_split_words_normalises_like_bert(tokenizer):
    assert token_code.split_words(tokenizer, "Naïve café, ChatGPT!") == [
        "naive", "cafe", ",", "chatgpt", "!",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="text is empty"):
        token_code.split_words(tokenizer, " ")


def test_encode_batch_pads_to_the_longest(tokenizer):
    texts = ["The cat sleeps", "A dog chased the ball across the garden", "Hi"]
    batch = token_code.encode_batch(tokenizer, texts)
    assert batch.ids.shape == batch.attention_mask.shape == (3, 10)
    assert batch.ids.dtype == batch.attention_mask.dtype == torch.int64
    assert batch.lengths == (5, 10, 3)
    assert batch.attention_mask.sum(dim=1).tolist() == list(batch.lengths)
    for row, length in enumerate(batch.lengths):
        assert batch.ids[row, 0] == 101 and batch.ids[row, length - 1] == 102
        assert (batch.ids[row, length:] == 0).all()
        assert batch.tokens[row][length:] == ("[PAD]",) * (10 - length)
        assert batch.tokens[row][:length] == token_code.tokenize(tokenizer, texts[row]).tokens


def test_encode_batch_equals_the_tokenizers_own_padding(tokenizer):
    texts = ["The cat sleeps", "A dog chased the ball across the garden", "Hi", "ok"]
    batch = token_code.encode_batch(tokenizer, texts)
    padding = Tokenizer.from_str(tokenizer.to_str())
    padding.enable_padding(pad_id=0, pad_token="[PAD]")
    reference = padding.encode_batch(texts)
    assert batch.ids.tolist() == [item.ids for item in reference]
    assert batch.attention_mask.tolist() == [item.attention_mask for item in reference]
    assert [list(row) for row in batch.tokens] == [item.tokens for item in reference]
    assert tokenizer.padding is None  # the caller's tokenizer is untouched


def test_encode_batch_of_one_has_no_padding(tokenizer):
    batch = token_code.encode_batch(tokenizer, ["just one sentence"])
    assert batch.attention_mask.all() and batch.ids.shape == (1, 5)


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ("a single string", "got one str: wrap it in a list"),
        ([], "texts is empty"),
        (["fine", "  "], r"texts\[1\] is empty"),
        (["fine", 3], r"texts\[1\] must be a str"),
    ],
)
def test_encode_batch_rejects_bad_input(tokenizer, texts, message):
    with pytest.raises(ValueError, match=message):
        token_code.encode_batch(tokenizer, texts)


def test_tokenizers_that_pad_or_truncate_are_refused(directory):
    raw = Tokenizer.from_file(str(directory / "tokenizer.json"))  # pads and truncates to 128
    assert raw.padding["length"] == 128 and raw.truncation["max_length"] == 128
    for tokenizer in (raw, Tokenizer.from_str(raw.to_str())):
        with pytest.raises(ValueError, match="pads or truncates every text"):
            token_code.encode_batch(tokenizer, ["a cat"])
        tokenizer.no_padding()  # truncation alone is refused too
        with pytest.raises(ValueError, match="pads or truncates every text"):
            token_code.tokenize(tokenizer, "a cat")


def test_encode_batch_needs_a_pad_token():
    bare = Tokenizer(WordLevel({"hello": 0, "[UNK]": 1}, unk_token="[UNK]"))
    bare.pre_tokenizer = Whitespace()
    with pytest.raises(ValueError, match=r"has no \[PAD\] token"):
        token_code.encode_batch(bare, ["hello", "hello hello"])


def test_single_token_id(tokenizer):
    assert token_code.single_token_id(tokenizer, "cat") == 4937
    with pytest.raises(ValueError, match=r"'tokenization' is not one token.*'token', '##ization'"):
        token_code.single_token_id(tokenizer, "tokenization")
    with pytest.raises(ValueError, match="word is empty"):
        token_code.single_token_id(tokenizer, "")


def test_ordinary_token_ids_leave_out_bracketed_tokens(tokenizer):
    ids = token_code.ordinary_token_ids(tokenizer)
    assert len(ids) == 30522 - 994 - 5  # 994 [unusedN] rows, 5 special tokens
    assert not {0, 1, 100, 101, 102, 103} & set(ids)
    assert 4937 in ids and tokenizer.token_to_id("[") in ids  # a lone bracket is ordinary


# --- the embedding is a lookup ----------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("vocab_size", "d_model"), [(5, 3), (50, 8), (1000, 16)])
@pytest.mark.parametrize("ids_shape", [(1,), (7,), (2, 5)])
def test_indexing_one_hot_and_nn_embedding_are_equal(seed, vocab_size, d_model, ids_shape):
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(vocab_size, d_model, generator=generator)
    ids = torch.randint(vocab_size, ids_shape, generator=generator)
    by_index = embeddings.lookup_by_index(table, ids)
    assert by_index.shape == (*ids_shape, d_model)
    assert torch.equal(
        by_index, embeddings.lookup_by_one_hot(table, ids)
    )  # exactly, not approximately
    assert torch.equal(by_index, embeddings.embedding_module(table)(ids))
    assert torch.equal(by_index, torch.nn.Embedding.from_pretrained(table)(ids))


def test_lookup_accepts_python_lists(table):
    assert torch.equal(embeddings.lookup_by_index(table, [101, 102]), table[[101, 102]])


def test_gradients_reach_only_looked_up_rows_and_add_up_for_repeats():
    table = torch.randn(10, 4, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([5, 7, 5])
    for lookup in (embeddings.lookup_by_index, embeddings.lookup_by_one_hot):
        weights = table.clone().requires_grad_()
        lookup(weights, ids).sum().backward()
        expected = torch.zeros(10, 4)
        expected[5], expected[7] = 2.0, 1.0
        assert torch.equal(weights.grad, expected)


def test_embedding_module_copies_and_trains(table):
    small = table[:20].clone()
    module = embeddings.embedding_module(small, padding_idx=0)
    assert module.weight.requires_grad and module.padding_idx == 0
    with torch.no_grad():
        module.weight.add_(1.0)
    assert torch.equal(small, table[:20])  # the table itself is untouched


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (torch.tensor([0.0, 1.0]), "ids must hold integers, got dtype torch.float32"),
        (torch.tensor([True]), "ids must hold integers"),
        (torch.tensor([0, 5]), r"ids must lie in 0..4 .*got values from 0 to 5"),
        (torch.tensor([-1, 2]), r"ids must lie in 0..4 .*from -1 to 2"),
        (torch.zeros(0, dtype=torch.int64), "ids is empty"),
    ],
)
@pytest.mark.parametrize(
    "lookup", [embeddings.lookup_by_index, embeddings.lookup_by_one_hot, embeddings.input_vectors]
)
def test_lookups_reject_bad_ids(ids, message, lookup):
    with pytest.raises(ValueError, match=message):
        lookup(torch.zeros(5, 4), ids)


@pytest.mark.parametrize("bad", [torch.zeros(5), torch.zeros(0, 3), np.zeros((5, 3))])
def test_lookups_reject_a_bad_table(bad):
    with pytest.raises(ValueError, match=r"table must be a non-empty tensor of shape \(vocab, D\)"):
        embeddings.lookup_by_index(bad, [0])


# --- the worked example -----------------------------------------------------------------------


def test_worked_example_is_the_outlines():
    assert word_vectors.HOW_ARE_YOU.words == ("How", "Are", "You")
    assert word_vectors.HOW_ARE_YOU.ids == (1234, 456, 23)
    assert word_vectors.HOW_ARE_YOU.vectors == (
        (0.8, -1.8, 0.6, -0.5),
        (-1.6, 1.3, -1.9, 0.4),
        (-0.3, 0.7, -1.4, -0.9),
    )
    assert word_vectors.HOW_ARE_YOU.d_model == 4


def test_worked_example_table_holds_the_vectors_at_the_ids():
    table = word_vectors.worked_example_table(seed=3)
    assert table.shape == (10_000, 4)
    ids = word_vectors.toy_token_ids("How Are You")
    assert ids == [1234, 456, 23]
    expected = torch.tensor(word_vectors.HOW_ARE_YOU.vectors, dtype=torch.float32)
    assert torch.equal(embeddings.lookup_by_index(table, ids), expected)
    assert torch.equal(embeddings.lookup_by_one_hot(table, ids), expected)
    other = word_vectors.worked_example_table(seed=4)
    assert torch.equal(other[ids], table[ids]) and not torch.equal(other, table)
    assert torch.equal(word_vectors.worked_example_table(seed=3), table)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("how are you", r"words \['how', 'are', 'you'\] are not in the toy vocabulary"),
        ("How Are We", r"words \['We'\] are not"),
        ("", "text is empty"),
    ],
)
def test_toy_vocabulary_rejects_unknown_words(text, message):
    with pytest.raises(ValueError, match=message):
        word_vectors.toy_token_ids(text)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ids": (1, 2)}, "same non-zero length"),
        ({"ids": (1, 1, 2)}, "must be unique"),
        ({"vectors": ((1.0,), (1.0, 2.0), (3.0,))}, "same length d_model"),
        ({"vocab_size": 1000}, r"ids must lie in 0..999"),
        ({"vocab_size": 0}, "vocab_size must be a positive int"),
    ],
)
def test_worked_example_validates(kwargs, message):
    with pytest.raises(ValueError, match=message):
        word_vectors.WorkedExample(**kwargs)


# --- token vector + position vector -----------------------------------------------------------


def test_input_vectors_add_the_sinusoidal_table():
    table = word_vectors.worked_example_table()
    ids = word_vectors.toy_token_ids("How Are You")
    x = embeddings.input_vectors(table, ids)
    positions = torch.tensor(sinusoidal_encoding(3, 4), dtype=torch.float32)
    assert torch.equal(x, table[ids] + positions)
    # position 0 adds sin 0 = 0 to even dimensions and cos 0 = 1 to odd ones
    torch.testing.assert_close(x[0], torch.tensor([0.8, -0.8, 0.6, 0.5]))


def test_same_token_same_embedding_different_input_vector():
    table = word_vectors.worked_example_table()
    ids = word_vectors.toy_token_ids("You Are You")
    assert torch.equal(
        embeddings.lookup_by_index(table, ids)[0], embeddings.lookup_by_index(table, ids)[2]
    )
    x = embeddings.input_vectors(table, ids)
    assert (x[0] - x[2]).abs().max() > 0.5


def test_input_vectors_for_a_batch_and_with_the_papers_scale():
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(30, 6, generator=generator)
    ids = torch.randint(30, (2, 5), generator=generator)
    batch = embeddings.input_vectors(table, ids)
    assert batch.shape == (2, 5, 6)
    for row in range(2):
        assert torch.equal(batch[row], embeddings.input_vectors(table, ids[row]))
    scaled = embeddings.input_vectors(table, ids, scale_by_sqrt_d_model=True)
    torch.testing.assert_close(scaled - batch, table[ids] * (math.sqrt(6) - 1))


def test_input_vectors_with_a_learned_position_table(directory, table):
    learned = embeddings.load_position_embeddings(directory)
    assert learned.shape == (512, table.shape[1])
    ids = torch.tensor([101, 1996, 4937, 102])
    x = embeddings.input_vectors(table, ids, positions=learned)
    assert torch.equal(x, table[ids] + learned[:4])
    with pytest.raises(ValueError, match=r"positions must have shape \(max_len, 384\)"):
        embeddings.input_vectors(table, ids, positions=learned[:, :5])
    with pytest.raises(ValueError, match="positions has 3 rows, fewer than T = 4"):
        embeddings.input_vectors(table, ids, positions=learned[:3])


def test_input_vectors_reject_bad_shapes():
    with pytest.raises(ValueError, match="d_model must be even"):
        embeddings.input_vectors(torch.zeros(5, 3), [0, 1])
    with pytest.raises(ValueError, match=r"ids must have shape \(T,\) or \(B, T\)"):
        embeddings.input_vectors(torch.zeros(5, 4), torch.zeros(1, 2, 3, dtype=torch.int64))


# --- similarity -------------------------------------------------------------------------------


def test_cosine_similarity_matrix_by_hand_and_against_torch():
    vectors = np.array([[1.0, 0.0], [1.0, 1.0], [-2.0, 0.0]])
    similarity = word_vectors.cosine_similarity_matrix(vectors)
    expected = np.array([[1, 1 / math.sqrt(2), -1], [1 / math.sqrt(2), 1, -1 / math.sqrt(2)]])
    np.testing.assert_allclose(similarity[:2], expected, atol=1e-15)
    random = torch.randn(6, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    reference = F.cosine_similarity(random[:, None, :], random[None, :, :], dim=-1)
    np.testing.assert_allclose(
        word_vectors.cosine_similarity_matrix(random), reference.numpy(), atol=1e-12
    )
    np.testing.assert_allclose(
        word_vectors.cosine_similarity_matrix(3.0 * random), reference, atol=1e-12
    )


@pytest.mark.parametrize(
    ("vectors", "message"),
    [
        (np.zeros(3), r"shape \(N, D\)"),
        (np.zeros((0, 3)), r"shape \(N, D\)"),
        (np.array([[1.0, 0.0], [0.0, 0.0]]), r"rows \[1\] of vectors are zero"),
    ],
)
def test_cosine_similarity_matrix_rejects_bad_input(vectors, message):
    with pytest.raises(ValueError, match=message):
        word_vectors.cosine_similarity_matrix(vectors)


def test_real_table_puts_cat_nearer_dog_than_sleep(tokenizer, table):
    similarity = word_vectors.word_similarities(tokenizer, table, ["cat", "dog", "sleep"])
    cat_dog, cat_sleep = similarity[0, 1], similarity[0, 2]
    assert cat_dog > cat_sleep + 0.2
    assert cat_dog == pytest.approx(0.424, abs=1e-3)
    assert cat_sleep == pytest.approx(0.136, abs=1e-3)
    royals = word_vectors.word_similarities(tokenizer, table, ["king", "queen", "cat"])
    assert royals[0, 1] > 0.6 > 0.1 > royals[0, 2]


def test_word_similarities_reject_bad_words(tokenizer, table):
    with pytest.raises(ValueError, match="words is empty"):
        word_vectors.word_similarities(tokenizer, table, [])
    with pytest.raises(ValueError, match="'unbelievably' is not one token"):
        word_vectors.word_similarities(tokenizer, table, ["cat", "unbelievably"])


def test_nearest_neighbours_of_cat(tokenizer, table):
    neighbours = word_vectors.nearest_neighbours(tokenizer, table, "cat", k=8)
    tokens = [token for token, _ in neighbours]
    assert tokens[:3] == ["cats", "kitten", "kitty"] and "dog" in tokens and "cat" not in tokens
    scores = [score for _, score in neighbours]
    assert scores == sorted(scores, reverse=True)
    # the same as a brute-force search with PyTorch's cosine similarity
    brute = F.cosine_similarity(table, table[4937][None], dim=1)
    brute[4937] = -2
    top = brute.topk(8)
    assert tokens == [tokenizer.id_to_token(i) for i in top.indices.tolist()]
    np.testing.assert_allclose(scores, top.values.numpy(), atol=1e-5)


@pytest.mark.parametrize(("k", "message"), [(0, "k must be a positive int"), (30522, "below")])
def test_nearest_neighbours_rejects_bad_k(tokenizer, table, k, message):
    with pytest.raises(ValueError, match=message):
        word_vectors.nearest_neighbours(tokenizer, table, "cat", k=k)


def test_random_pairs_are_distinct_rows_and_reproducible():
    orthogonal = torch.eye(3)  # any two different rows have cosine 0, a row with itself 1
    cosines = word_vectors.random_pair_cosines(orthogonal, pairs=500, seed=1, candidates=[0, 2])
    assert cosines.shape == (500,) and np.array_equal(cosines, np.zeros(500))
    table = torch.randn(200, 64, generator=torch.Generator().manual_seed(0))
    first = word_vectors.random_pair_cosines(table, pairs=2000, seed=5)
    assert np.array_equal(first, word_vectors.random_pair_cosines(table, pairs=2000, seed=5))
    assert abs(first.mean()) < 0.02 and first.std() == pytest.approx(1 / 8, rel=0.1)


def test_real_random_pairs_are_far_below_cat_and_dog(tokenizer, table):
    cosines = word_vectors.random_pair_cosines(
        table, 20_000, candidates=token_code.ordinary_token_ids(tokenizer)
    )
    assert abs(cosines.mean()) < 0.03
    assert np.quantile(cosines, 0.99) < 0.3 < 0.42


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pairs": 0}, "pairs must be a positive int"),
        ({"candidates": [1]}, "at least 2 IDs"),
        ({"candidates": [1, 9]}, r"ids must lie in 0..4"),
    ],
)
def test_random_pairs_reject_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        word_vectors.random_pair_cosines(torch.randn(5, 3), **kwargs)


# --- BPE and WordPiece ------------------------------------------------------------------------


def test_bpe_learns_sennrichs_merges():
    # Sennrich et al. (2016), section 3.2: the toy dictionary and its ten first merges
    merges = token_code.learn_bpe({"low": 5, "lower": 2, "newest": 6, "widest": 3}, num_merges=10)
    assert merges == [
        ("e", "s"), ("es", "t"), ("est", "</w>"), ("l", "o"), ("lo", "w"),
        ("n", "e"), ("ne", "w"), ("new", "est</w>"), ("low", "</w>"), ("w", "i"),
    ]  # fmt: skip
    assert token_code.apply_bpe("lowest", merges) == [
        "low",
        "est</w>",
    ]  # an unseen word, in known pieces
    assert token_code.apply_bpe("newest", merges) == ["newest</w>"]
    assert token_code.apply_bpe("wider", merges) == ["wi", "d", "e", "r", "</w>"]


def test_first_pair_counts_are_what_the_first_merge_picks_from():
    counts = token_code.first_pair_counts({"low": 5, "lower": 2, "newest": 6, "widest": 3})
    assert counts[("e", "s")] == counts[("s", "t")] == counts[("t", "</w>")] == 9  # a 3-way tie
    assert counts[("w", "e")] == 8 and counts[("l", "o")] == 7 and counts[("r", "</w>")] == 2
    assert max(counts.values()) == 9 and sum(counts.values()) == 5 * 3 + 2 * 5 + 6 * 6 + 3 * 6
    assert max(counts, key=counts.get) == ("e", "s")  # learn_bpe's first merge
    with pytest.raises(ValueError, match="word_counts is empty"):
        token_code.first_pair_counts({})


def test_bpe_breaks_ties_by_first_seen_and_stops_when_done():
    assert token_code.learn_bpe({"ab": 1, "cd": 1}, num_merges=1) == [("a", "b")]
    assert token_code.learn_bpe({"cd": 1, "ab": 1}, num_merges=1) == [("c", "d")]
    assert token_code.learn_bpe({"ab": 3}, num_merges=10) == [("a", "b"), ("ab", "</w>")]


@pytest.mark.parametrize(
    ("counts", "merges", "message"),
    [
        ({}, 3, "word_counts is empty"),
        ({"a b": 1}, 3, "without spaces"),
        ({"": 1}, 3, "non-empty str"),
        ({"ab": 0}, 3, r"word_counts\['ab'\] must be a positive int"),
        ({"ab": 1}, 0, "num_merges must be a positive int"),
    ],
)
def test_bpe_rejects_bad_input(counts, merges, message):
    with pytest.raises(ValueError, match=message):
        token_code.learn_bpe(counts, merges)


def test_apply_bpe_rejects_bad_words():
    with pytest.raises(ValueError, match="word must be a non-empty str"):
        token_code.apply_bpe("", [])


def test_wordpiece_is_greedy_longest_match_first():
    vocabulary = {"a", "ab", "##c", "##bc", "un", "##aff", "##able"}
    assert token_code.wordpiece("abc", vocabulary) == ["ab", "##c"]  # not "a", "##bc"
    assert token_code.wordpiece("unaffable", vocabulary) == ["un", "##aff", "##able"]
    assert token_code.wordpiece("abx", vocabulary) == [
        "[UNK]"
    ]  # one unmatched piece: the whole word
    assert token_code.wordpiece("a" * 11, ["a", "##a"], max_chars=10) == ["[UNK]"]
    with pytest.raises(ValueError, match="word must be a non-empty str without spaces"):
        token_code.wordpiece("a b", vocabulary)


def test_wordpiece_matches_the_real_tokenizer(directory, tokenizer):
    vocabulary = token_code.load_vocabulary(directory)
    text = PARAGRAPH + " " + "x" * 101 + " 🙂 你好"
    ours = [
        piece
        for word in token_code.split_words(tokenizer, text)
        for piece in token_code.wordpiece(word, vocabulary)
    ]
    assert ours == tokenizer.encode(text, add_special_tokens=False).tokens
    assert ours.count("[UNK]") == 4  # the 101-letter word, the emoji, and each Chinese character


# --- embeddings are learned -------------------------------------------------------------------


def test_context_pairs():
    pairs = word_vectors.context_pairs(["the cat sleeps"], word_vectors.TOY_VOCABULARY)
    the, cat, sleeps = (
        word_vectors.TOY_VOCABULARY.index(word) for word in ("the", "cat", "sleeps")
    )
    assert pairs.tolist() == [
        [the, cat], [the, sleeps], [cat, the], [cat, sleeps], [sleeps, the], [sleeps, cat],
    ]  # fmt: skip
    assert word_vectors.context_pairs(
        word_vectors.TOY_CORPUS, word_vectors.TOY_VOCABULARY
    ).shape == (48, 2)


@pytest.mark.parametrize(
    ("corpus", "message"),
    [
        ([], "corpus is empty"),
        (["the kitten purrs"], r"\['purrs'\] of 'the kitten purrs' are not in the vocabulary"),
        (["cat", "dog"], "no sentence of two or more words"),
        (["the cat", ""], "every sentence is empty"),
    ],
)
def test_context_pairs_reject_bad_corpora(corpus, message):
    with pytest.raises(ValueError, match=message):
        word_vectors.context_pairs(corpus, word_vectors.TOY_VOCABULARY)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_model": 0}, "d_model must be a positive int"),
        ({"steps": 2.5}, "steps must be a positive int"),
        ({"learning_rate": 0.0}, "learning_rate must be positive"),
    ],
)
def test_skip_gram_config_validates(kwargs, message):
    with pytest.raises(ValueError, match=message):
        word_vectors.SkipGramConfig(**kwargs)


def test_skip_gram_model_uses_only_its_generator():
    before = torch.random.get_rng_state()
    model = word_vectors.SkipGram(13, 4, torch.Generator().manual_seed(0))
    assert torch.equal(before, torch.random.get_rng_state())
    again = word_vectors.SkipGram(13, 4, torch.Generator().manual_seed(0))
    assert torch.equal(model.embedding.weight, again.embedding.weight)
    ids = torch.tensor([3, 4, 3])
    scores = model(ids)
    assert scores.shape == (3, 13)
    torch.testing.assert_close(scores, model.embedding.weight[ids] @ model.output.T)
    with pytest.raises(ValueError, match="vocab_size must be a positive int"):
        word_vectors.SkipGram(0, 4)


def test_skip_gram_step_is_one_plain_gradient_descent_step():
    model = word_vectors.SkipGram(13, 4, torch.Generator().manual_seed(0))
    pairs = word_vectors.context_pairs(word_vectors.TOY_CORPUS, word_vectors.TOY_VOCABULARY)
    table, output = model.embedding.weight.detach().clone(), model.output.detach().clone()
    expected_loss = F.cross_entropy(
        table[pairs[:, 0]] @ output.T, pairs[:, 1]
    )  # the loss before the step
    loss = word_vectors.skip_gram_step(model, pairs, learning_rate=0.5)
    torch.testing.assert_close(loss, expected_loss)
    for parameter, before in ((model.embedding.weight, table), (model.output, output)):
        torch.testing.assert_close(parameter.detach(), before - 0.5 * parameter.grad)
    assert word_vectors.skip_gram_step(model, pairs, learning_rate=0.5) < loss  # it learns


@pytest.fixture(scope="module")
def run():
    return word_vectors.train_skip_gram()


def test_training_lowers_the_loss(run):
    assert len(run.losses) == 50
    assert run.losses[0] > math.log(len(run.vocabulary)) and run.losses[-1] < 1.25  # from guessing
    assert all(later < earlier for earlier, later in zip(run.losses, run.losses[1:], strict=False))


def test_only_rows_of_tokens_in_the_corpus_get_gradient_and_move(run):
    seen = {word for sentence in word_vectors.TOY_CORPUS for word in sentence.split()}
    for index, token in enumerate(run.vocabulary):
        gradient, moved = run.first_gradient[index], run.moved()[index]
        if token in seen:
            assert gradient.abs().max() > 0 and moved > 0.3, token
        else:  # [PAD], kitten, truck: exactly zero, not merely small
            assert torch.equal(gradient, torch.zeros_like(gradient)), token
            assert moved == 0.0 and torch.equal(run.final[index], run.initial[index]), token
    # the output layer is different: the softmax pushes every non-target word down
    assert (run.first_output_gradient.abs().sum(dim=1) > 0).all()


def test_words_with_the_same_contexts_end_up_similar(run):
    same = [("cat", "dog"), ("car", "bus"), ("sleeps", "eats"), ("drives", "stops")]
    before = np.mean([run.cosine(a, b, after=False) for a, b in same])
    after = np.mean([run.cosine(a, b) for a, b in same])
    assert after > 0.85 and after > before + 0.2  # how far below it starts depends on the seed
    assert run.cosine("cat", "dog") > 0.7 > 0 > run.cosine("cat", "car")


def test_training_is_reproducible_and_depends_on_the_seed(run):
    again = word_vectors.train_skip_gram()
    assert torch.equal(again.final, run.final) and again.losses == run.losses
    other = word_vectors.train_skip_gram(word_vectors.SkipGramConfig(seed=1))
    assert not torch.equal(other.initial, run.initial)


def test_written_out_sgd_is_torch_sgd():
    config = word_vectors.SkipGramConfig(steps=5, learning_rate=0.7, seed=2)
    ours = word_vectors.train_skip_gram(config)
    model = word_vectors.SkipGram(
        len(word_vectors.TOY_VOCABULARY), 4, torch.Generator().manual_seed(2)
    )
    optimiser = torch.optim.SGD(model.parameters(), lr=0.7)
    pairs = word_vectors.context_pairs(word_vectors.TOY_CORPUS, word_vectors.TOY_VOCABULARY)
    for _ in range(5):
        optimiser.zero_grad()
        F.cross_entropy(model(pairs[:, 0]), pairs[:, 1]).backward()
        optimiser.step()
    torch.testing.assert_close(ours.final, model.embedding.weight.detach())
