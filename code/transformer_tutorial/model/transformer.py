"""The whole Transformer, and the three kinds of model built from the same parts.

Source: Vaswani et al. (2017), section 3 and Figure 1. Token IDs become vectors (section 3.4:
embeddings scaled by ``sqrt(d_model)``, weights shared with the pre-softmax linear layer), get
their positions added (3.5), and pass through ``N = 6`` identical layers (3.1):

- an **encoder layer** is self-attention, then the feed-forward network, each wrapped in
  Add & Norm;
- a **decoder layer** is *masked* self-attention, then cross-attention (queries from the decoder,
  keys and values from the encoder's output), then the feed-forward network, each wrapped in
  Add & Norm;
- a final linear layer and softmax turn each decoder vector into next-token probabilities.

The same parts make all three kinds of model (:func:`build_model`):

- ``"encoder-decoder"`` (the paper, T5): :class:`EncoderDecoder`;
- ``"encoder-only"`` (BERT): :class:`EncoderOnly`, every token sees every token;
- ``"decoder-only"`` (GPT): :class:`DecoderOnly`, decoder layers without cross-attention.

:class:`TransformerConfig` holds every hyperparameter; :func:`paper_base`, :func:`paper_big`,
:func:`bert_base` and :func:`gpt2_small` are the published configurations, and
:func:`count_parameters` counts what the book's code builds for them (on PyTorch's "meta"
device, so counting GPT-2 takes no memory).
"""

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from transformer_tutorial.model.attention import linear
from transformer_tutorial.model.checks import check_positive_int
from transformer_tutorial.model.draws import normal
from transformer_tutorial.model.feed_forward import Activation, FeedForward, FeedForwardConfig
from transformer_tutorial.model.masks import causal_mask, combine_masks
from transformer_tutorial.model.multi_head import (
    MultiHeadAttention,
    MultiHeadConfig,
    copy_from_torch,
)
from transformer_tutorial.model.norm import LayerNorm, SublayerConfig, SublayerConnection
from transformer_tutorial.model.positions import (
    LearnedPositionalEmbedding,
    PositionalConfig,
    SinusoidalPositionalEncoding,
)

__all__ = [
    "KINDS",
    "DecoderLayer",
    "DecoderOnly",
    "Embeddings",
    "EncoderDecoder",
    "EncoderLayer",
    "EncoderOnly",
    "Hypothesis",
    "ModelOutput",
    "Stack",
    "StackOutput",
    "TransformerConfig",
    "beam_search",
    "bert_base",
    "build_model",
    "copy_decoder_layer_from_torch",
    "copy_encoder_layer_from_torch",
    "count_parameters",
    "generate",
    "gpt2_small",
    "greedy_translate",
    "key_padding_mask",
    "length_penalty",
    "paper_base",
    "paper_big",
    "parameter_breakdown",
]

Kind = Literal["encoder-decoder", "encoder-only", "decoder-only"]
KINDS: tuple[str, ...] = ("encoder-decoder", "encoder-only", "decoder-only")


@dataclass
class TransformerConfig:
    """Every hyperparameter of a Transformer. The defaults are the paper's base model.

    ``d_ff=None`` and ``num_decoder_layers=None`` are filled in when the config is made
    (``4 * d_model`` and ``num_layers``), so ``dataclasses.replace(config, d_model=...)`` or
    ``replace(config, num_layers=...)`` keeps the old filled-in values: pass them again.
    """

    kind: Kind = "encoder-decoder"  # which stacks exist (see the module docstring)
    vocab_size: int = 37000  # tokens in the (shared) vocabulary (paper EN-DE: about 37000 BPE)
    target_vocab_size: int | None = None  # decoder vocabulary if different; None: shared (paper)
    d_model: int = 512  # width of every token vector between sub-layers (paper: 512)
    num_heads: int = 8  # attention heads per attention layer (paper: 8)
    d_ff: int | None = None  # feed-forward hidden width; None: 4 x d_model (paper: 2048)
    num_layers: int = 6  # layers in each stack (paper: N = 6 in the encoder and the decoder)
    num_decoder_layers: int | None = None  # if the decoder has a different depth; None: same
    max_length: int = 5000  # longest sequence the position table covers
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"  # paper: sinusoidal
    norm_first: bool = False  # False: post-LN (paper, BERT); True: pre-LN (GPT-2)
    activation: Activation = (
        "relu"  # FFN nonlinearity: relu (paper), gelu (BERT), gelu_tanh (GPT-2)
    )
    dropout: float = 0.1  # on embeddings and every sub-layer output while training (paper: 0.1)
    layer_norm_eps: float = 1e-5  # LayerNorm's epsilon (BERT: 1e-12)
    bias: bool = True  # biases in attention and FFN projections
    scale_embeddings: bool = True  # token embeddings times sqrt(d_model) (paper, section 3.4)
    embedding_norm: bool = False  # LayerNorm right after the embedding sum (BERT)
    type_vocab_size: int = 0  # BERT's segment (token-type) embeddings; 0: none
    output_head: bool = True  # final linear layer to vocabulary logits (BertModel: none)
    tie_embeddings: bool = True  # that layer reuses the token embedding matrix (paper, GPT-2)
    pooler: bool = False  # BERT's tanh layer over the first ([CLS]) vector
    pad_id: int | None = 0  # token ID of [PAD]: keys with it are masked by default; None: none

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_layers
        for name in ("vocab_size", "d_model", "num_heads", "d_ff", "num_layers", "max_length"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("num_decoder_layers", self.num_decoder_layers)
        MultiHeadConfig(d_model=self.d_model, num_heads=self.num_heads)  # heads divide d_model
        FeedForwardConfig(self.d_model, self.d_ff, self.activation)  # activation is known
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(
                f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.target_vocab_size is not None:
            check_positive_int("target_vocab_size", self.target_vocab_size)
            if self.kind != "encoder-decoder":
                raise ValueError("target_vocab_size only applies to kind='encoder-decoder'")
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size must be >= 0, got {self.type_vocab_size}")
        if self.tie_embeddings and not self.output_head:
            raise ValueError("tie_embeddings=True needs output_head=True (there is nothing to tie)")
        if self.pooler and self.kind != "encoder-only":
            raise ValueError("pooler (BERT's [CLS] layer) only applies to kind='encoder-only'")
        if self.kind == "encoder-decoder" and not self.output_head:
            raise ValueError("an encoder-decoder model needs output_head=True to predict tokens")
        if self.pad_id is not None and not 0 <= self.pad_id < self.decoder_vocab_size:
            raise ValueError(f"pad_id={self.pad_id} is outside the vocabulary")

    @property
    def decoder_vocab_size(self) -> int:
        """Vocabulary the output layer predicts over."""
        return self.target_vocab_size or self.vocab_size

    @property
    def d_k(self) -> int:
        return self.d_model // self.num_heads

    def sublayer(self) -> SublayerConfig:
        return SublayerConfig(self.d_model, self.norm_first, self.dropout, self.layer_norm_eps)


def paper_base() -> TransformerConfig:
    """Vaswani et al. (2017), Table 3, "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1,
    EN-DE shared vocabulary of about 37000 tokens. Published size: 65 x 10^6 parameters."""
    return TransformerConfig()


def paper_big() -> TransformerConfig:
    """Table 3, "big": d_model=1024, d_ff=4096, h=16, P_drop=0.3. Published: 213 x 10^6."""
    return TransformerConfig(d_model=1024, num_heads=16, d_ff=4096, dropout=0.3)


def bert_base() -> TransformerConfig:
    """Devlin et al. (2019), BERT-base uncased: L=12, H=768, A=12, d_ff=3072, GELU, learned
    positions (512), two segment types, LayerNorm after embeddings, post-LN, pooler, no LM head
    (as ``BertModel``). Published: 110M; exactly 109,482,240."""
    return TransformerConfig(
        kind="encoder-only",
        vocab_size=30522,
        d_model=768,
        num_heads=12,
        d_ff=3072,
        num_layers=12,
        max_length=512,
        positional="learned",
        activation="gelu",
        layer_norm_eps=1e-12,
        scale_embeddings=False,
        embedding_norm=True,
        type_vocab_size=2,
        output_head=False,
        tie_embeddings=False,
        pooler=True,
        pad_id=0,
    )


def gpt2_small() -> TransformerConfig:
    """Radford et al. (2019), GPT-2 small: 12 layers, d_model=768, 12 heads, context 1024,
    vocabulary 50257, pre-LN with a final LayerNorm, tanh-GELU, output layer tied to the token
    embeddings. Published: 124M (117M in the paper's table); exactly 124,439,808."""
    return TransformerConfig(
        kind="decoder-only",
        vocab_size=50257,
        d_model=768,
        num_heads=12,
        d_ff=3072,
        num_layers=12,
        max_length=1024,
        positional="learned",
        norm_first=True,
        activation="gelu_tanh",
        scale_embeddings=False,
        pad_id=None,
    )


def _embedding_table(
    rows: int, d_model: int, std: float, generator: torch.Generator | None
) -> nn.Embedding:
    """An ``nn.Embedding`` ``(rows, D)`` drawn from N(0, std^2) with ``generator``."""
    table = nn.Embedding(rows, d_model, _weight=torch.empty(rows, d_model))  # no global draw
    if not table.weight.is_meta:  # on "meta" (counting) there is nothing to fill, and
        with torch.no_grad():  # normal_ there would import torch._dynamo: 2-5 s, measured
            table.weight.copy_(normal((rows, d_model), std, generator))
    return table


def _check_ids(ids: torch.Tensor, name: str, vocab_size: int, max_length: int) -> None:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point:
        shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"{name} must be an integer tensor of token IDs (B, T), got {shape}")
    if 0 in ids.shape:
        raise ValueError(f"{name} is empty: shape {tuple(ids.shape)}; need B >= 1 and T >= 1")
    if ids.shape[1] > max_length:
        raise ValueError(
            f"{name} has {ids.shape[1]} positions, more than the model's max_length={max_length}"
        )
    if ids.device.type != "meta" and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(
            f"{name} holds IDs outside the vocabulary [0, {vocab_size}): "
            f"min {int(ids.min())}, max {int(ids.max())}"
        )


class Embeddings(nn.Module):
    """Token IDs ``(B, T)`` -> vectors ``(B, T, D)``: token embedding (times ``sqrt(D)`` if
    ``scale_embeddings``) + position (+ token type), then LayerNorm (BERT) and dropout."""

    def __init__(
        self,
        config: TransformerConfig,
        vocab_size: int | None = None,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size or config.vocab_size
        d_model = config.d_model
        # N(0, 1/D) with the sqrt(D) scale gives unit-size vectors; BERT and GPT-2 use N(0, 0.02^2)
        std = d_model**-0.5 if config.scale_embeddings else 0.02
        self.token = _embedding_table(self.vocab_size, d_model, std, generator)  # (V, D)
        positions = PositionalConfig(d_model=d_model, max_len=config.max_length)
        if config.positional == "sinusoidal":
            self.position = SinusoidalPositionalEncoding(positions)
        else:
            self.position = LearnedPositionalEmbedding(positions, generator=generator)
        self.token_type = (
            _embedding_table(config.type_vocab_size, d_model, 0.02, generator)
            if config.type_vocab_size
            else None
        )
        self.norm = LayerNorm(d_model, config.layer_norm_eps) if config.embedding_norm else None
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids: torch.Tensor, token_types: torch.Tensor | None = None) -> torch.Tensor:
        _check_ids(ids, "ids", self.vocab_size, self.config.max_length)
        vectors = self.token(ids)  # (B, T) -> (B, T, D)
        if self.config.scale_embeddings:
            vectors = vectors * math.sqrt(self.config.d_model)
        vectors = self.position(vectors)  # (B, T, D) + (T, D)
        if self.token_type is not None:
            if token_types is None:
                token_types = torch.zeros_like(ids)  # every token in segment 0
            if token_types.shape != ids.shape:
                raise ValueError(
                    f"token_types must have the shape of ids {tuple(ids.shape)}, "
                    f"got {tuple(token_types.shape)}"
                )
            vectors = vectors + self.token_type(token_types)  # (B, T, D)
        elif token_types is not None:
            raise ValueError("token_types given, but the config has type_vocab_size=0")
        if self.norm is not None:
            vectors = self.norm(vectors)
        return self.dropout(vectors)


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward network, each wrapped in Add & Norm (section 3.1)."""

    def __init__(self, config: TransformerConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        attention = MultiHeadConfig(config.d_model, config.num_heads, config.bias)
        self.self_attention = MultiHeadAttention(attention, generator=generator)
        self.self_attention_block = SublayerConnection(config.sublayer())
        ffn = FeedForwardConfig(config.d_model, config.d_ff, config.activation, bias=config.bias)
        self.feed_forward = FeedForward(ffn, generator=generator)
        self.feed_forward_block = SublayerConnection(config.sublayer())

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x`` ``(B, T, D)``, ``mask`` boolean broadcastable to ``(B, H, T, T)``.
        Returns ``(B, T, D)`` and, if ``need_weights``, the weights ``(B, H, T, T)``."""
        attention = _Recorder(self.self_attention, mask, need_weights)
        x = self.self_attention_block(x, attention)  # (B, T, D)
        x = self.feed_forward_block(x, self.feed_forward)  # (B, T, D)
        return x, attention.weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output (if
    ``cross_attention``), and the feed-forward network, each wrapped in Add & Norm (3.1).

    Without cross-attention this is a GPT block: the same computation as an encoder layer, with
    a causal mask. The mask is the caller's to give: :class:`Stack` builds it.
    """

    def __init__(
        self,
        config: TransformerConfig,
        cross_attention: bool = True,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.config = config
        attention = MultiHeadConfig(config.d_model, config.num_heads, config.bias)
        self.self_attention = MultiHeadAttention(attention, generator=generator)
        self.self_attention_block = SublayerConnection(config.sublayer())
        self.cross_attention = (
            MultiHeadAttention(attention, generator=generator) if cross_attention else None
        )
        self.cross_attention_block = (
            SublayerConnection(config.sublayer()) if cross_attention else None
        )
        ffn = FeedForwardConfig(config.d_model, config.d_ff, config.activation, bias=config.bias)
        self.feed_forward = FeedForward(ffn, generator=generator)
        self.feed_forward_block = SublayerConnection(config.sublayer())

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``x`` ``(B, T, D)``; ``mask`` broadcastable to ``(B, H, T, T)``; ``memory`` the
        encoder output ``(B, S, D)``; ``memory_mask`` broadcastable to ``(B, H, T, S)``.
        Returns ``(B, T, D)``, self-attention weights ``(B, H, T, T)`` and cross-attention
        weights ``(B, H, T, S)`` (``None`` unless ``need_weights``)."""
        _check_memory(memory, self.cross_attention is not None)
        self_attention = _Recorder(self.self_attention, mask, need_weights)
        x = self.self_attention_block(x, self_attention)  # (B, T, D)
        cross_weights = None
        if self.cross_attention is not None:
            cross = _Recorder(self.cross_attention, memory_mask, need_weights, memory)
            x = self.cross_attention_block(x, cross)  # queries (B, T, D), keys (B, S, D)
            cross_weights = cross.weights
        x = self.feed_forward_block(x, self.feed_forward)  # (B, T, D)
        return x, self_attention.weights, cross_weights


def _check_memory(memory: torch.Tensor | None, has_cross_attention: bool) -> None:
    if (memory is None) == has_cross_attention:
        raise ValueError(
            "memory (the encoder output, (B, S, D)) must be given exactly when the layer "
            f"has cross-attention (this one {'has' if has_cross_attention else 'has none'})"
        )


@dataclass
class _Recorder:
    """Calls an attention layer as a one-argument sub-layer and keeps its weights."""

    attention: MultiHeadAttention
    mask: torch.Tensor | None
    need_weights: bool
    memory: torch.Tensor | None = None  # keys and values from the encoder (cross-attention)
    weights: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        output, self.weights = self.attention(
            x, self.memory, mask=self.mask, need_weights=self.need_weights
        )
        return output


@dataclass
class StackOutput:
    """What a stack of layers computed for a batch."""

    hidden: torch.Tensor  # (B, T, D): the last layer's output (after the final norm, if any)
    hidden_states: list[torch.Tensor] = field(default_factory=list)
    # L + 1 tensors (B, T, D): the embeddings, then each layer's output
    self_attention: list[torch.Tensor] = field(default_factory=list)  # L x (B, H, T, T)
    cross_attention: list[torch.Tensor] = field(default_factory=list)  # L x (B, H, T, S)


def key_padding_mask(padding_mask: torch.Tensor, ids: torch.Tensor, name: str) -> torch.Tensor:
    """``(B, S)`` with ``True``/1 for real tokens and ``False``/0 for padding (the convention of
    Hugging Face's ``attention_mask``) -> boolean ``(B, 1, 1, S)``."""
    if not isinstance(padding_mask, torch.Tensor) or padding_mask.shape != ids.shape:
        shape = (
            tuple(padding_mask.shape)
            if isinstance(padding_mask, torch.Tensor)
            else type(padding_mask).__name__
        )
        raise ValueError(f"{name} must have the shape of the IDs {tuple(ids.shape)}, got {shape}")
    if padding_mask.dtype != torch.bool:
        if padding_mask.dtype.is_floating_point or not bool(
            ((padding_mask == 0) | (padding_mask == 1)).all()
        ):
            raise ValueError(f"{name} must be boolean or hold only 0 and 1")
        padding_mask = padding_mask == 1
    return padding_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


class Stack(nn.Module):
    """Embeddings, then ``num_layers`` layers, then (pre-LN only) a final LayerNorm.

    ``layer="encoder"`` builds :class:`EncoderLayer` s; ``layer="decoder"`` builds
    :class:`DecoderLayer` s, with cross-attention if ``cross_attention``. ``causal`` is the
    default for :meth:`forward`'s argument of the same name.
    """

    def __init__(
        self,
        config: TransformerConfig,
        embeddings: Embeddings,
        layer: Literal["encoder", "decoder"],
        cross_attention: bool = False,
        causal: bool = False,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.config, self.kind, self.causal = config, layer, causal
        self.embeddings = embeddings
        if layer == "encoder":
            self.layers = nn.ModuleList(
                EncoderLayer(config, generator=generator) for _ in range(config.num_layers)
            )
        else:
            self.layers = nn.ModuleList(
                DecoderLayer(config, cross_attention, generator=generator)
                for _ in range(config.num_decoder_layers)
            )
        # Pre-LN leaves the residual path un-normalised, so the stack ends with one LayerNorm
        # (GPT-2's ln_f); post-LN already ends every layer with one.
        self.final_norm = (
            LayerNorm(config.d_model, config.layer_norm_eps) if config.norm_first else None
        )

    def forward(
        self,
        ids: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        memory_padding_mask: torch.Tensor | None = None,
        token_types: torch.Tensor | None = None,
        need_weights: bool = False,
        causal: bool | None = None,
    ) -> StackOutput:
        """``ids`` ``(B, T)``. ``padding_mask`` ``(B, T)`` (True/1 = real token); if ``None``
        and ``config.pad_id`` is set, tokens equal to it are treated as padding. ``memory``
        ``(B, S, D)`` and its ``memory_padding_mask`` ``(B, S)`` feed cross-attention."""
        x = self.embeddings(ids, token_types)  # (B, T) -> (B, T, D)
        keys = self._padding(ids, padding_mask, "padding_mask")  # (B, 1, 1, T) or None
        causal = self.causal if causal is None else causal
        length = ids.shape[1]
        mask = combine_masks(keys, causal_mask(length).to(ids.device) if causal else None)
        # (B, 1, T, T), (T, T), (B, 1, 1, T) or None
        memory_mask = None
        if memory is not None and memory_padding_mask is not None:
            memory_mask = key_padding_mask(
                memory_padding_mask, memory[..., 0], "memory_padding_mask"
            )  # (B, S) -> (B, 1, 1, S)
        output = StackOutput(hidden=x, hidden_states=[x])
        for layer in self.layers:
            if self.kind == "encoder":
                x, weights = layer(x, mask, need_weights)
                cross = None
            else:
                x, weights, cross = layer(x, mask, memory, memory_mask, need_weights)
            output.hidden_states.append(x)
            if need_weights:
                output.self_attention.append(weights)
                if cross is not None:
                    output.cross_attention.append(cross)
        output.hidden = self.final_norm(x) if self.final_norm is not None else x
        return output

    def _padding(
        self, ids: torch.Tensor, padding_mask: torch.Tensor | None, name: str
    ) -> torch.Tensor | None:
        if padding_mask is not None:
            return key_padding_mask(padding_mask, ids, name)
        if self.config.pad_id is None:
            return None
        return (ids != self.config.pad_id)[:, None, None, :]  # (B, T) -> (B, 1, 1, T)


@dataclass
class ModelOutput:
    """What a model computed: logits and the stacks' full outputs (for the explorers)."""

    logits: torch.Tensor | None  # (B, T, |V|) next-token (or masked-token) scores; None: no head
    encoder: StackOutput | None = None
    decoder: StackOutput | None = None
    pooled: torch.Tensor | None = None  # (B, D): BERT's pooler output


class _OutputHead(nn.Module):
    """The final linear layer ``(B, T, D) -> (B, T, |V|)``, tied to ``embeddings.token`` or not."""

    def __init__(
        self,
        config: TransformerConfig,
        embeddings: Embeddings,
        generator: torch.Generator | None,
    ):
        super().__init__()
        self.tied = embeddings.token if config.tie_embeddings else None
        self.projection = (
            None
            if config.tie_embeddings
            else linear(config.d_model, embeddings.vocab_size, bias=False, generator=generator)
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.tied is not None:
            return hidden @ self.tied.weight.T  # (B, T, D) @ (D, |V|) -> (B, T, |V|)
        return self.projection(hidden)  # (B, T, D) -> (B, T, |V|)


class EncoderDecoder(nn.Module):
    """The paper's model: the encoder reads the source, the decoder writes the target.

    Source and target share one embedding matrix unless ``target_vocab_size`` is set; the
    output layer is tied to the target embedding when ``tie_embeddings`` (section 3.4).
    """

    def __init__(self, config: TransformerConfig, generator: torch.Generator | None = None):
        super().__init__()
        if config.kind != "encoder-decoder":
            raise ValueError(f"EncoderDecoder needs kind='encoder-decoder', got {config.kind!r}")
        self.config = config
        source_embeddings = Embeddings(config, generator=generator)
        target_embeddings = (
            source_embeddings
            if config.target_vocab_size is None
            else Embeddings(config, config.target_vocab_size, generator=generator)
        )
        self.encoder = Stack(config, source_embeddings, "encoder", generator=generator)
        self.decoder = Stack(
            config, target_embeddings, "decoder", cross_attention=True, causal=True,
            generator=generator,
        )  # fmt: skip
        self.head = _OutputHead(config, target_embeddings, generator)

    def encode(
        self, source: torch.Tensor, source_mask: torch.Tensor | None = None, need_weights=False
    ) -> StackOutput:
        return self.encoder(source, source_mask, need_weights=need_weights)

    def decode(
        self,
        target: torch.Tensor,
        memory: StackOutput,
        source: torch.Tensor,
        source_mask: torch.Tensor | None = None,
        target_mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> StackOutput:
        memory_mask = source_mask
        if memory_mask is None and self.config.pad_id is not None:
            memory_mask = source != self.config.pad_id  # (B, S)
        return self.decoder(
            target, target_mask, memory.hidden, memory_mask, need_weights=need_weights
        )

    def forward(
        self,
        source: torch.Tensor,
        target: torch.Tensor,
        source_mask: torch.Tensor | None = None,
        target_mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> ModelOutput:
        """``source`` ``(B, S)`` and ``target`` ``(B, T)`` token IDs (the target shifted right:
        it starts with a start token). Returns logits ``(B, T, |V|)``: at position ``t``, scores
        for target token ``t + 1``."""
        encoded = self.encode(source, source_mask, need_weights)
        decoded = self.decode(target, encoded, source, source_mask, target_mask, need_weights)
        return ModelOutput(self.head(decoded.hidden), encoder=encoded, decoder=decoded)


class DecoderOnly(nn.Module):
    """A GPT: decoder layers without cross-attention, a causal mask, a tied output layer."""

    def __init__(self, config: TransformerConfig, generator: torch.Generator | None = None):
        super().__init__()
        if config.kind != "decoder-only":
            raise ValueError(f"DecoderOnly needs kind='decoder-only', got {config.kind!r}")
        self.config = config
        embeddings = Embeddings(config, generator=generator)
        self.decoder = Stack(config, embeddings, "decoder", causal=True, generator=generator)
        self.head = _OutputHead(config, embeddings, generator) if config.output_head else None

    def forward(
        self,
        ids: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        causal: bool = True,
    ) -> ModelOutput:
        """``ids`` ``(B, T)`` -> logits ``(B, T, |V|)``; position ``t`` scores token ``t + 1``.

        ``causal=False`` removes the look-ahead mask: the model that cheats in chapter 8.
        """
        decoded = self.decoder(ids, padding_mask, need_weights=need_weights, causal=causal)
        logits = self.head(decoded.hidden) if self.head is not None else None
        return ModelOutput(logits, decoder=decoded)


class EncoderOnly(nn.Module):
    """A BERT: encoder layers, every token sees every (non-padding) token."""

    def __init__(self, config: TransformerConfig, generator: torch.Generator | None = None):
        super().__init__()
        if config.kind != "encoder-only":
            raise ValueError(f"EncoderOnly needs kind='encoder-only', got {config.kind!r}")
        self.config = config
        embeddings = Embeddings(config, generator=generator)
        self.encoder = Stack(config, embeddings, "encoder", generator=generator)
        self.head = _OutputHead(config, embeddings, generator) if config.output_head else None
        self.pooler = (
            linear(config.d_model, config.d_model, bias=True, generator=generator)
            if config.pooler
            else None
        )

    def forward(
        self,
        ids: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        token_types: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> ModelOutput:
        """``ids`` ``(B, T)`` -> :class:`ModelOutput` with ``encoder.hidden`` ``(B, T, D)``."""
        encoded = self.encoder(
            ids, padding_mask, token_types=token_types, need_weights=need_weights
        )
        logits = self.head(encoded.hidden) if self.head is not None else None
        pooled = None
        if self.pooler is not None:
            pooled = torch.tanh(self.pooler(encoded.hidden[:, 0]))  # (B, D): the [CLS] vector
        return ModelOutput(logits, encoder=encoded, pooled=pooled)


MODEL_CLASSES: dict[str, type[nn.Module]] = {
    "encoder-decoder": EncoderDecoder,
    "encoder-only": EncoderOnly,
    "decoder-only": DecoderOnly,
}


def build_model(
    config: TransformerConfig, generator: torch.Generator | None = None
) -> EncoderDecoder | EncoderOnly | DecoderOnly:
    """The model of ``config.kind``, its weights drawn from ``generator``."""
    return MODEL_CLASSES[config.kind](config, generator=generator)


def _on_meta(model_or_config: nn.Module | TransformerConfig) -> nn.Module:
    if isinstance(model_or_config, nn.Module):
        return model_or_config
    if not isinstance(model_or_config, TransformerConfig):
        raise ValueError(
            f"expected an nn.Module or a TransformerConfig, got {type(model_or_config).__name__}"
        )
    with torch.device("meta"):  # shapes only: no memory, no random numbers
        return build_model(model_or_config)


def count_parameters(model_or_config: nn.Module | TransformerConfig) -> int:
    """Trainable numbers in a model, each shared tensor counted once (``parameters()``
    de-duplicates tied weights). A config is built on the "meta" device first."""
    return sum(parameter.numel() for parameter in _on_meta(model_or_config).parameters())


PARTS = ("embeddings", "attention", "feed-forward", "layer norms", "output and pooler")


def parameter_breakdown(model_or_config: nn.Module | TransformerConfig) -> dict[str, int]:
    """:func:`count_parameters` split by where the numbers sit (the keys of ``PARTS``)."""
    counts = dict.fromkeys(PARTS, 0)
    for name, parameter in _on_meta(model_or_config).named_parameters():
        if "embeddings" in name and "norm" not in name:
            part = "embeddings"
        elif "norm" in name:
            part = "layer norms"
        elif "attention" in name:
            part = "attention"
        elif "feed_forward" in name:
            part = "feed-forward"
        else:
            part = "output and pooler"
        counts[part] += parameter.numel()
    return counts


@torch.no_grad()
def generate(
    model: DecoderOnly, prompt: torch.Tensor, new_tokens: int, causal: bool = True
) -> torch.Tensor:
    """Greedy continuation: append the most likely next token ``new_tokens`` times.
    ``prompt`` ``(B, T)`` -> ``(B, T + new_tokens)``. Runs in eval mode (no dropout) and
    restores the model's mode afterwards."""
    check_positive_int("new_tokens", new_tokens)
    was_training = model.training
    model.eval()
    try:
        ids = prompt
        for _ in range(new_tokens):
            logits = model(ids, causal=causal).logits  # (B, T, |V|)
            next_ids = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
            ids = torch.cat([ids, next_ids], dim=1)  # (B, T) -> (B, T + 1)
    finally:
        model.train(was_training)
    return ids


@torch.no_grad()
def greedy_translate(
    model: EncoderDecoder,
    source: torch.Tensor,
    start_id: int,
    length: int,
    source_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Encode ``source`` ``(B, S)`` once, then decode ``length`` tokens greedily after
    ``start_id``. Returns ``(B, length)`` (the start token not included)."""
    check_positive_int("length", length)
    was_training = model.training
    model.eval()
    try:
        memory = model.encode(source, source_mask)
        target = torch.full((source.shape[0], 1), start_id, dtype=source.dtype)  # (B, 1)
        for _ in range(length):
            decoded = model.decode(target, memory, source, source_mask)
            next_ids = model.head(decoded.hidden[:, -1:]).argmax(dim=-1)  # (B, 1)
            target = torch.cat([target, next_ids], dim=1)  # (B, t) -> (B, t + 1)
    finally:
        model.train(was_training)
    return target[:, 1:]


@dataclass
class Hypothesis:
    """One output of :func:`beam_search`: tokens after the start token, ending with the end
    token if finished, their total log-probability, and the score beams are ranked by."""

    tokens: tuple[int, ...]
    log_probability: float  # sum of log p(token | source, earlier tokens)
    score: float  # log_probability / length_penalty(len(tokens))
    finished: bool  # ends with the end token (else: stopped at max_length)


def length_penalty(length: int, alpha: float) -> float:
    """Wu et al. (2016), equation 14: ``((5 + length) / 6) ** alpha``; 1 for ``alpha = 0``."""
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def beam_search(
    model: EncoderDecoder,
    source: torch.Tensor,
    start_id: int,
    end_id: int,
    max_length: int,
    beam_size: int = 4,
    alpha: float = 0.6,
) -> list[Hypothesis]:
    """Beam search for one source ``(1, S)``, as the paper decodes (section 6.1: beam size 4,
    length penalty ``alpha = 0.6`` after Wu et al. 2016).

    Keep the ``beam_size`` most probable unfinished outputs; extend each by every token, and
    keep the best of all extensions. An extension that writes ``end_id`` is finished and leaves
    the beam, which shrinks by one, so at most ``beam_size`` outputs come back. They are ranked
    by log-probability divided by :func:`length_penalty`, best first. With ``beam_size = 1``
    this is greedy decoding."""
    _check_beam(source, max_length, beam_size, alpha)
    was_training = model.training
    model.eval()
    try:
        encoded = model.encode(source).hidden  # (1, S, D), computed once
        beams = torch.full((1, 1), start_id, dtype=source.dtype)  # (k, 1): [START]
        scores = torch.zeros(1, dtype=torch.float64)  # (k,): log-probability of each beam
        done: list[tuple[tuple[int, ...], float]] = []
        for _ in range(max_length):
            k = len(beams)
            memory = StackOutput(encoded.expand(k, -1, -1))  # (1, S, D) -> (k, S, D)
            hidden = model.decode(beams, memory, source.expand(k, -1)).hidden  # (k, t, D)
            log_p = torch.log_softmax(model.head(hidden[:, -1]).double(), dim=-1)  # (k, |V|)
            total = (scores[:, None] + log_p).flatten()  # (k |V|,): every extension
            best = total.topk(min(beam_size - len(done), len(total))).indices  # the best ones
            rows, tokens = best // log_p.shape[1], best % log_p.shape[1]
            beams = torch.cat([beams[rows], tokens[:, None]], dim=1)  # (k', t + 1)
            scores = total[best]
            ended = tokens == end_id
            done += _hypotheses(beams[ended], scores[ended])
            beams, scores = beams[~ended], scores[~ended]
            if len(beams) == 0:
                break
    finally:
        model.train(was_training)
    outputs = [
        Hypothesis(tokens, log_p, log_p / length_penalty(len(tokens), alpha), finished)
        for finished, hypotheses in ((True, done), (False, _hypotheses(beams, scores)))
        for tokens, log_p in hypotheses
    ]
    return sorted(outputs, key=lambda hypothesis: -hypothesis.score)


def _hypotheses(beams: torch.Tensor, scores: torch.Tensor) -> list[tuple[tuple[int, ...], float]]:
    """Rows of ``beams`` ``(k, t)`` without their start token, with their scores ``(k,)``."""
    return [
        (tuple(row[1:].tolist()), float(score)) for row, score in zip(beams, scores, strict=True)
    ]


def _check_beam(source: torch.Tensor, max_length: int, beam_size: int, alpha: float) -> None:
    if source.ndim != 2 or source.shape[0] != 1:
        raise ValueError(f"source must be one sequence of IDs (1, S), got {tuple(source.shape)}")
    check_positive_int("max_length", max_length)
    check_positive_int("beam_size", beam_size)
    if not alpha >= 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")


def _copy_norm(target: LayerNorm, source: nn.LayerNorm) -> None:
    target.gain.copy_(source.weight)
    target.bias.copy_(source.bias)


def _copy_feed_forward(target: FeedForward, source: nn.Module) -> None:
    target.W_1.load_state_dict(source.linear1.state_dict())  # (F, D)
    target.W_2.load_state_dict(source.linear2.state_dict())  # (D, F)


def _check_layer_match(config: TransformerConfig, source: nn.Module) -> None:
    source_first = getattr(source, "norm_first", False)
    checks: list[tuple[str, object, object]] = [
        ("d_model", source.self_attn.embed_dim, config.d_model),
        ("num_heads", source.self_attn.num_heads, config.num_heads),
        ("d_ff", source.linear1.out_features, config.d_ff),
        ("norm_first", source_first, config.norm_first),
    ]
    for name, theirs, ours in checks:
        if theirs != ours:
            raise ValueError(f"source has {name}={theirs}, target config has {name}={ours}")


@torch.no_grad()
def copy_encoder_layer_from_torch(
    target: EncoderLayer, source: nn.TransformerEncoderLayer
) -> EncoderLayer:
    """Load the weights of PyTorch's ``nn.TransformerEncoderLayer`` (same sizes, same
    ``norm_first``) into ``target``; returns ``target``."""
    _check_layer_match(target.config, source)
    copy_from_torch(target.self_attention, source.self_attn)
    _copy_norm(target.self_attention_block.norm, source.norm1)
    _copy_feed_forward(target.feed_forward, source)
    _copy_norm(target.feed_forward_block.norm, source.norm2)
    return target


@torch.no_grad()
def copy_decoder_layer_from_torch(
    target: DecoderLayer, source: nn.TransformerDecoderLayer
) -> DecoderLayer:
    """Load ``nn.TransformerDecoderLayer`` weights into a :class:`DecoderLayer` with
    cross-attention; returns ``target``."""
    if target.cross_attention is None:
        raise ValueError("target has no cross-attention; nn.TransformerDecoderLayer always does")
    _check_layer_match(target.config, source)
    copy_from_torch(target.self_attention, source.self_attn)
    _copy_norm(target.self_attention_block.norm, source.norm1)
    copy_from_torch(target.cross_attention, source.multihead_attn)
    _copy_norm(target.cross_attention_block.norm, source.norm2)
    _copy_feed_forward(target.feed_forward, source)
    _copy_norm(target.feed_forward_block.norm, source.norm3)
    return target
