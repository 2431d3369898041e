"""Text to token IDs: the real model's WordPiece tokenizer, and byte-pair encoding from scratch.

Sources:

- Vaswani et al. (2017), "Attention Is All You Need", section 5.1: the base model reads
  byte-pair encoded English-German (a shared vocabulary of about 37,000 tokens) and word-piece
  English-French (32,000).
- Sennrich, Haddow & Birch (2016), "Neural Machine Translation of Rare Words with Subword
  Units", Algorithm 1: byte-pair encoding (BPE), learned by merging the most frequent pair.
- Wu et al. (2016), Google's NMT system, and Devlin et al. (2019), BERT: WordPiece, applied
  greedily longest-match-first, with ``##`` marking a piece that continues a word.

The real model is all-MiniLM-L6-v2, with an uncased WordPiece vocabulary of 30,522 tokens; its
``tokenizer.json`` and ``vocab.txt`` are read with ``tokenizers`` only (no network, no
``transformers``). Shapes use the package letters, ``B`` batch and ``T`` tokens.
"""

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import torch
from tokenizers import Tokenizer

from transformer_tutorial.model.checks import check_positive_int, check_text
from transformer_tutorial.model.files import require_files

__all__ = [
    "CLS_TOKEN",
    "END_OF_WORD",
    "PAD_TOKEN",
    "SEP_TOKEN",
    "UNK_TOKEN",
    "EncodedBatch",
    "TokenizedText",
    "apply_bpe",
    "encode_batch",
    "first_pair_counts",
    "learn_bpe",
    "load_tokenizer",
    "load_vocabulary",
    "ordinary_token_ids",
    "single_token_id",
    "split_words",
    "tokenize",
    "wordpiece",
]


PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN = "[PAD]", "[UNK]", "[CLS]", "[SEP]"


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """The model's tokenizer, read from ``tokenizer.json``, with truncation and padding **off**.

    The file asks for truncation to 128 tokens and padding of every text to exactly 128; left
    on, every sentence would come back 128 tokens long, mostly ``[PAD]``. Here ``encode`` gives
    exactly the tokens of the text, and :func:`encode_batch` pads a batch explicitly, to its
    longest sentence.
    """
    directory = require_files(directory, ("tokenizer.json",))
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def load_vocabulary(directory: str | os.PathLike) -> list[str]:
    """The WordPiece vocabulary from ``vocab.txt``: the token with ID ``i`` is entry ``i``."""
    directory = require_files(directory, ("vocab.txt",))
    with open(directory / "vocab.txt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in lines]


@dataclass(frozen=True)
class TokenizedText:
    """One text, tokenized: the pieces, their IDs, and which word each piece came from."""

    text: str
    tokens: tuple[str, ...]  # ("[CLS]", "token", "##ization", ..., "[SEP]")
    ids: tuple[int, ...]  # (T,) one vocabulary row per token
    words: tuple[int | None, ...]  # word index of each token; None for [CLS] and [SEP]


def _check_unpadded(tokenizer: Tokenizer) -> None:
    if tokenizer.padding is not None or tokenizer.truncation is not None:
        raise ValueError(
            "tokenizer pads or truncates every text (the settings of tokenizer.json): load it "
            "with load_tokenizer, or call its no_padding() and no_truncation() first"
        )


def tokenize(tokenizer: Tokenizer, text: str) -> TokenizedText:
    """Normalise, split into words, split words into vocabulary pieces, add [CLS] ... [SEP].

    The tokenizer must neither pad nor truncate (see :func:`load_tokenizer`): a padded text
    would come back with ``[PAD]`` tokens counted as part of it.
    """
    _check_unpadded(tokenizer)
    encoding = tokenizer.encode(check_text(text))
    return TokenizedText(
        text, tuple(encoding.tokens), tuple(encoding.ids), tuple(encoding.word_ids)
    )


def split_words(tokenizer: Tokenizer, text: str) -> list[str]:
    """The words the tokenizer sees before WordPiece: lower-cased, accents stripped, and split
    on spaces and punctuation (``tokenizer.json``'s normalizer and pre-tokenizer)."""
    normalized = tokenizer.normalizer.normalize_str(check_text(text))
    return [word for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized)]


END_OF_WORD = "</w>"  # Sennrich et al.'s end-of-word symbol: "est</w>" ends a word, "est" not


def _merge(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    """Replace every occurrence of ``pair`` (left to right, not overlapping) by one symbol."""
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return tuple(merged)


def learn_bpe(word_counts: Mapping[str, int], num_merges: int) -> list[tuple[str, str]]:
    """Byte-pair encoding (Sennrich et al. 2016, Algorithm 1): the list of learned merges.

    Every word starts as its characters plus :data:`END_OF_WORD`; each round merges the most
    frequent pair of neighbouring symbols (counted over the corpus) everywhere.
    """
    _check_word_counts(word_counts, num_merges)
    corpus = [((*word, END_OF_WORD), count) for word, count in word_counts.items()]
    merges = []
    for _ in range(num_merges):
        pair_counts: dict[tuple[str, str], int] = {}  # (left, right) -> occurrences
        for symbols, count in corpus:
            for pair in pairwise(symbols):  # every pair of neighbouring symbols
                pair_counts[pair] = pair_counts.get(pair, 0) + count
        if not pair_counts:  # every word is a single symbol: nothing left to merge
            break
        best = max(pair_counts, key=pair_counts.get)  # the first seen wins a tie
        merges.append(best)
        corpus = [(_merge(symbols, best), count) for symbols, count in corpus]
    return merges


def first_pair_counts(word_counts: Mapping[str, int]) -> dict[tuple[str, str], int]:
    """How often each pair of neighbouring characters occurs, weighted by the words' counts:
    what :func:`learn_bpe` counts before its first merge (``END_OF_WORD`` included)."""
    _check_word_counts(word_counts, 1)
    counts: dict[tuple[str, str], int] = {}  # (left, right) -> occurrences
    for word, count in word_counts.items():
        for pair in pairwise((*word, END_OF_WORD)):
            counts[pair] = counts.get(pair, 0) + count
    return counts


def _check_word_counts(word_counts: Mapping[str, int], num_merges: int) -> None:
    if len(word_counts) == 0:
        raise ValueError("word_counts is empty: give at least one word and its count")
    for word, count in word_counts.items():
        if not isinstance(word, str) or not word or any(char.isspace() for char in word):
            raise ValueError(f"every word must be a non-empty str without spaces, got {word!r}")
        check_positive_int(f"word_counts[{word!r}]", count)
    check_positive_int("num_merges", num_merges)


def apply_bpe(word: str, merges: Sequence[tuple[str, str]]) -> list[str]:
    """Split a (possibly unseen) word with learned merges, applied in the order learned."""
    _check_word(word)
    symbols = (*word, END_OF_WORD)
    for pair in merges:
        symbols = _merge(symbols, tuple(pair))
    return list(symbols)


def wordpiece(word: str, vocabulary: Collection[str], max_chars: int = 100) -> list[str]:
    """WordPiece as BERT applies it (Devlin et al. 2019): greedy longest match first.

    Take the longest beginning of the word that is in the vocabulary, then the longest
    ``##``-piece of what is left, and so on. A word with no match, or longer than ``max_chars``,
    becomes ``[UNK]``. ``word`` must already be normalised and split (:func:`split_words`).
    """
    _check_word(word)
    if len(word) > max_chars:
        return [UNK_TOKEN]
    known = set(vocabulary)  # fast membership tests
    pieces, start = [], 0
    while start < len(word):
        end = len(word)  # try the longest candidate first, then shorter ones
        while end > start:
            candidate = word[start:end] if start == 0 else "##" + word[start:end]
            if candidate in known:
                break
            end -= 1
        if end == start:  # not even one character is in the vocabulary
            return [UNK_TOKEN]
        pieces.append(candidate)
        start = end
    return pieces


def _check_word(word: object) -> None:
    if not isinstance(word, str) or not word or any(char.isspace() for char in word):
        raise ValueError(f"word must be a non-empty str without spaces, got {word!r}")


def _token_id(tokenizer: Tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise ValueError(f"the tokenizer has no {token} token")
    return token_id


@dataclass(frozen=True)
class EncodedBatch:
    """Several texts padded with ``[PAD]`` to one length ``T``, and the mask that marks padding."""

    texts: tuple[str, ...]
    tokens: tuple[tuple[str, ...], ...]  # (B, T) token strings, "[PAD]" at the end of short texts
    ids: torch.Tensor  # (B, T) int64
    attention_mask: torch.Tensor  # (B, T) int64: 1 for a real token, 0 for padding
    lengths: tuple[int, ...]  # (B,) real tokens per text, [CLS] and [SEP] included


def encode_batch(tokenizer: Tokenizer, texts: Sequence[str]) -> EncodedBatch:
    """Tokenize each text, then pad every row on the right to the longest one.

    The padding is done here, in plain sight, rather than by the tokenizer; the tests check
    that it gives what the tokenizer's own ``enable_padding`` gives.
    """
    if isinstance(texts, str):
        raise ValueError("texts must be a sequence of str, got one str: wrap it in a list")
    if len(texts) == 0:
        raise ValueError("texts is empty: give at least one text")
    encoded = [tokenize(tokenizer, check_text(text, f"texts[{i}]")) for i, text in enumerate(texts)]
    pad_id = _token_id(tokenizer, PAD_TOKEN)
    length = max(len(item.ids) for item in encoded)  # T
    ids, mask, tokens = [], [], []
    for item in encoded:
        padding = length - len(item.ids)
        ids.append(list(item.ids) + [pad_id] * padding)
        mask.append([1] * len(item.ids) + [0] * padding)
        tokens.append(item.tokens + (PAD_TOKEN,) * padding)
    return EncodedBatch(
        texts=tuple(texts),
        tokens=tuple(tokens),
        ids=torch.tensor(ids, dtype=torch.int64),  # (B, T)
        attention_mask=torch.tensor(mask, dtype=torch.int64),  # (B, T)
        lengths=tuple(len(item.ids) for item in encoded),
    )


def single_token_id(tokenizer: Tokenizer, word: str) -> int:
    """The ID of ``word`` when the vocabulary holds it as one token; ValueError otherwise."""
    encoding = tokenizer.encode(check_text(word, "word"), add_special_tokens=False)
    if len(encoding.ids) != 1:
        raise ValueError(
            f"word {word!r} is not one token of the vocabulary: it splits into {encoding.tokens}"
        )
    return encoding.ids[0]


def ordinary_token_ids(tokenizer: Tokenizer) -> list[int]:
    """IDs of every token that is not bracketed (``[PAD]``, ``[CLS]``, ``[unused7]``, ...).

    BERT's vocabulary reserves about a thousand ``[unusedN]`` rows that training never touches;
    statistics over "random tokens" should not include them.
    """
    vocabulary = tokenizer.get_vocab()  # token -> id
    return sorted(
        token_id
        for token, token_id in vocabulary.items()
        if not (token.startswith("[") and token.endswith("]") and len(token) > 2)
    )
