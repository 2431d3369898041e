"""What chapter 10 measures on the real pretrained encoder (all-MiniLM-L6-v2) run by our code.

The model is loaded by :func:`~transformer_tutorial.model.checkpoint.load_pretrained`; this
module only measures it:

- :func:`compare_with_reference`: the largest differences from Hugging Face's
  ``transformers.BertModel`` on the same files (hidden states and every attention weight);
- :func:`attention_record` and :func:`head_roles`: every layer's and head's weights on a
  sentence, and how much weight each head gives to the previous and next word piece, to the
  token itself, to ``[CLS]`` and to ``[SEP]``; :func:`diagonal_count`: how often a row's largest
  weight is on the diagonal;
- :func:`group_similarity`, :func:`anchor_points` and :func:`shift_record`: the "apple" shift,
  a word's cosine similarity to fruit and technology anchor words after every layer.

Shapes use the package notation: ``B`` sentences, ``T`` tokens, ``D`` = ``d_model`` (384),
``H`` heads (12); ``L`` here is the number of layers (6) and ``N`` a number of words.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from transformer_tutorial.model.checkpoint import PretrainedEncoder
from transformer_tutorial.model.tokens import (
    CLS_TOKEN,
    SEP_TOKEN,
)
from transformer_tutorial.model.transformer import StackOutput
from transformer_tutorial.studies.embedding_shift import favours_self
from transformer_tutorial.studies.records import AnchorPoint, AttentionRecord, ShiftRecord

__all__ = [
    "FRUIT_ANCHORS",
    "HEAD_ROLES",
    "TECHNOLOGY_ANCHORS",
    "DiagonalCount",
    "ReferenceComparison",
    "anchor_points",
    "compare_with_reference",
    "diagonal_count",
    "group_similarity",
    "head_roles",
]


FRUIT_ANCHORS = ("fruit", "banana", "orange", "pear")


TECHNOLOGY_ANCHORS = ("computer", "iphone", "microsoft", "software")


@dataclass
class ReferenceComparison:
    """The book's encoder and a reference implementation on the same batch, compared at every
    real (non-padding) query position."""

    ours: StackOutput  # the book's encoder: hidden (B, T, D), self_attention L x (B, H, T, S)
    theirs: object  # the reference's output: last_hidden_state (B, T, D), attentions
    hidden_gap: float  # largest |difference| of the final vectors at real tokens
    weight_gap: float  # largest |difference| of any layer's weights in a real query's row
    tokens: int  # real tokens compared
    weights: int  # attention weights compared, over every layer


def compare_with_reference(
    encoder: PretrainedEncoder, reference: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor
) -> ReferenceComparison:
    """Run ``encoder`` and ``reference`` (``transformers``' ``BertModel`` with
    ``attn_implementation="eager"``, so that it returns its weights) on token IDs ``(B, T)``
    with padding mask ``(B, T)`` (1 = real token).

    Rows of padded queries are left out: they are not used by anything downstream, and the two
    implementations are free to fill them differently. Every key of a real query's row counts.
    """
    with torch.inference_mode():
        ours = encoder.model(ids, padding_mask=mask, need_weights=True).encoder
        theirs = reference(input_ids=ids, attention_mask=mask, output_attentions=True)
    if len(ours.self_attention) != len(theirs.attentions):
        raise ValueError(
            f"the reference has {len(theirs.attentions)} layers, the book's encoder "
            f"{len(ours.self_attention)}"
        )
    real = mask.bool()  # (B, T)
    hidden_gap = (ours.hidden - theirs.last_hidden_state)[real].abs().max().item()
    gaps, weights = [], 0
    for mine, other in zip(ours.self_attention, theirs.attentions, strict=True):
        if mine.shape != other.shape:
            raise ValueError(f"weights of shape {tuple(mine.shape)} vs {tuple(other.shape)}")
        rows = real[:, None, :, None].expand_as(mine)  # (B, H, T, S): real queries, every key
        gaps.append((mine - other)[rows].abs().max())
        weights += int(rows.sum())
    weight_gap = torch.stack(gaps).max().item()  # torch's max keeps a NaN: then no check passes
    return ReferenceComparison(ours, theirs, hidden_gap, weight_gap, int(real.sum()), weights)


def _cosines(vectors: torch.Tensor, others: torch.Tensor) -> np.ndarray:
    """Cosine similarity of each row of ``vectors`` ``(n, D)`` with the same row of ``others``."""
    return torch.nn.functional.cosine_similarity(vectors, others, dim=-1).double().numpy()


def _check_groups(anchors: Mapping[str, torch.Tensor], groups: Mapping[str, Sequence[str]]) -> None:
    if len(groups) == 0:
        raise ValueError("groups is empty: name at least one group of anchor words")
    for group, words in groups.items():
        if isinstance(words, str) or len(words) == 0:
            raise ValueError(
                f"group {group!r} must be a non-empty sequence of words, got {words!r}"
            )
        missing = [word for word in words if word not in anchors]
        if missing:
            raise ValueError(f"group {group!r}: no anchor vectors for {missing}")


def group_similarity(
    vectors: torch.Tensor,
    anchors: Mapping[str, torch.Tensor],
    groups: Mapping[str, Sequence[str]],
) -> dict[str, np.ndarray]:
    """Layer by layer, the mean cosine similarity of ``vectors`` ``(L + 1, D)`` (one word after
    each layer) to the anchor words of each group (each ``(L + 1, D)``, same layers).

    Returns ``{group: (L + 1,)}``. Each layer is compared with the same layer: the vectors of
    different layers live in differently scaled spaces.
    """
    _check_groups(anchors, groups)
    if not isinstance(vectors, torch.Tensor) or vectors.dim() != 2:
        shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(vectors)
        raise ValueError(f"vectors must be a tensor of shape (L + 1, D), got {shape}")
    result = {}
    for group, words in groups.items():
        for word in words:
            if anchors[word].shape != vectors.shape:
                raise ValueError(
                    f"anchor {word!r} has shape {tuple(anchors[word].shape)}, the vectors "
                    f"{tuple(vectors.shape)}: both must be (L + 1, D)"
                )
        result[group] = np.mean([_cosines(vectors, anchors[word]) for word in words], axis=0)
    return result


def anchor_points(
    anchors: Mapping[str, torch.Tensor],
    groups: Mapping[str, Sequence[str]],
    layer: int = -1,
) -> list[AnchorPoint]:
    """The anchor words as points of the apple explorer's plane, at ``layer`` (default: last).

    Coordinates as in :meth:`PretrainedEncoder.shift_record`: mean cosine similarity to the
    words of each of the two groups, leaving the word itself out (its similarity to itself is
    1 and would say nothing).
    """

    _check_groups(anchors, groups)
    if len(groups) != 2:
        raise ValueError(f"groups must name exactly two groups (two axes), got {list(groups)}")
    points = []
    for group, words in groups.items():
        for word in words:
            coordinates = []
            for other_group in groups.values():
                others = [other for other in other_group if other != word]
                if not others:
                    raise ValueError(f"group {list(other_group)} has no word besides {word!r}")
                rows = torch.stack([anchors[other][layer] for other in others])  # (N, D)
                coordinates.append(float(_cosines(anchors[word][layer][None], rows).mean()))
            points.append(AnchorPoint(word, group, (coordinates[0], coordinates[1])))
    return points


HEAD_ROLES = ("previous word piece", "next word piece", "itself", "[CLS]", "[SEP]")


def head_roles(records: Sequence[AttentionRecord]) -> dict[str, np.ndarray]:
    """What each head looks at, on average: ``{role: (L, H)}`` for the roles of
    :data:`HEAD_ROLES` (after Clark et al. 2019, "What does BERT look at?").

    The queries are the word pieces (not ``[CLS]`` or ``[SEP]``) of every record; for each,
    the weight its row puts on the piece just before it, just after it, on itself, on
    ``[CLS]`` and on ``[SEP]``. "Previous" and "next" count only queries whose neighbour is a
    word piece too (the first piece's left neighbour is ``[CLS]``, already a role of its own).
    """
    if len(records) == 0:
        raise ValueError("records is empty: give at least one sentence's attention")
    sums: dict[str, np.ndarray] = {}
    counts = dict.fromkeys(HEAD_ROLES, 0)
    for record in records:
        weights = np.asarray(record.weights, dtype=float)  # (L, H, T, T)
        if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
            raise ValueError(
                f"record {record.label!r}: weights must have shape (L, H, T, T), got "
                f"{weights.shape}"
            )
        special = [token in (CLS_TOKEN, SEP_TOKEN) for token in record.tokens]
        pieces = [t for t, is_special in enumerate(special) if not is_special]
        if not pieces:
            raise ValueError(f"record {record.label!r} has no word piece between [CLS] and [SEP]")
        cls = [t for t, token in enumerate(record.tokens) if token == CLS_TOKEN]
        sep = [t for t, token in enumerate(record.tokens) if token == SEP_TOKEN]
        targets = {  # role -> {query position: the key positions it is scored on}
            "previous word piece": {t: [t - 1] for t in pieces if t >= 1 and not special[t - 1]},
            "next word piece": {
                t: [t + 1] for t in pieces if t + 1 < len(special) and not special[t + 1]
            },
            "itself": {t: [t] for t in pieces},
            "[CLS]": {t: cls for t in pieces} if cls else {},
            "[SEP]": {t: sep for t in pieces} if sep else {},
        }
        for role, by_query in targets.items():
            for query, keys in by_query.items():
                weight = weights[:, :, query, keys].sum(axis=-1)  # (L, H, K) -> (L, H)
                sums[role] = sums[role] + weight if role in sums else weight
                counts[role] += 1
    return {role: sums[role] / counts[role] for role in HEAD_ROLES if counts[role]}


@dataclass(frozen=True)
class DiagonalCount:
    """Where each attention row puts its largest weight, counted over many sentences."""

    rows: int  # query rows counted: every token of every sentence, in every layer and head
    on_self: int  # rows whose largest weight is on the query token itself (a tie: not)
    on_special: int  # rows whose largest weight is on [CLS] or [SEP]
    chance: float  # share of rows a largest weight placed at random would put on the token
    head_shares: np.ndarray  # (L, H): each head's share of rows that favour the token itself

    @property
    def self_share(self) -> float:
        return self.on_self / self.rows

    @property
    def special_share(self) -> float:
        return self.on_special / self.rows


def diagonal_count(records: Sequence[AttentionRecord]) -> DiagonalCount:
    """Test "every token pays most attention to itself" on real weights.

    For each record (one sentence, weights ``(L, H, T, T)``, every record of the same model),
    every query row of every layer and head: is its largest weight on the token itself (a tie
    does not count: ``embedding_shift.favours_self``), and is it on ``[CLS]`` or
    ``[SEP]``?
    """
    if len(records) == 0:
        raise ValueError("records is empty: give at least one sentence's attention")
    rows = on_self = on_special = 0
    chance = 0.0
    head_counts: np.ndarray | None = None
    for record in records:
        weights = np.asarray(record.weights, dtype=float)
        if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
            raise ValueError(
                f"record {record.label!r}: weights must have shape (L, H, T, T), got "
                f"{weights.shape}"
            )
        if head_counts is not None and weights.shape[:2] != head_counts.shape:
            raise ValueError(
                f"record {record.label!r}: (L, H) = {weights.shape[:2]}, the first record has "
                f"{head_counts.shape}: count one model at a time"
            )
        length = weights.shape[-1]
        on_itself = favours_self(weights)  # (L, H, T)
        special = [i for i, token in enumerate(record.tokens) if token in (CLS_TOKEN, SEP_TOKEN)]
        strongest = weights.argmax(axis=-1)  # (L, H, T); a tie goes to the first key
        counts = on_itself.sum(axis=-1)  # (L, H)
        head_counts = counts if head_counts is None else head_counts + counts
        rows += on_itself.size
        on_self += int(on_itself.sum())
        on_special += int(np.isin(strongest, special).sum())
        chance += on_itself.size / length  # each of the T rows: 1 chance in T
    head_rows = rows / head_counts.size  # the same number of rows in every head
    return DiagonalCount(rows, on_self, on_special, chance / rows, head_counts / head_rows)


def attention_record(
    encoder: PretrainedEncoder, sentence: str, label: str | None = None
) -> AttentionRecord:
    """Every layer's and head's weights on ``sentence``, for the heatmap explorer."""

    run = encoder.forward([sentence])
    return AttentionRecord(label or sentence, run.tokens(0), run.weights(0), model=encoder.name)


def shift_record(
    encoder: PretrainedEncoder,
    sentence: str,
    word: str,
    anchors: Mapping[str, torch.Tensor],
    groups: Mapping[str, Sequence[str]],
    label: str | None = None,
) -> ShiftRecord:
    """``word``'s path through the layers in ``sentence``, for the apple explorer.

    The plane has one axis per group (exactly two groups): point ``l`` is the word's mean
    cosine similarity to the group's anchor words, both measured after layer ``l``
    (:func:`group_similarity`). Beside it, the word's attention over the sentence,
    averaged over every layer and head.
    """

    if len(groups) != 2:
        raise ValueError(f"groups must name exactly two groups (two axes), got {list(groups)}")
    positions = encoder.word_positions(sentence, word)
    run = encoder.forward([sentence])
    vectors = run.hidden(0)[:, positions].mean(dim=1)  # (L + 1, P, D) -> (L + 1, D)
    similarity = group_similarity(vectors, anchors, groups)
    trajectory = np.stack([similarity[group] for group in groups], axis=1)  # (L + 1, 2)
    looked = run.weights(0)[:, :, positions].mean(axis=(0, 1, 2))  # (L, H, P, T) -> (T,)
    return ShiftRecord(label or sentence, word, trajectory, run.tokens(0), looked)
