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
  a word's cosine similarity to fruit and technology anchor words after every layer;
- :func:`attention_locality` and :func:`sense_separation`: the claim "early layers learn local
  syntax, later layers abstract meaning", layer by layer: how near each layer's heads look,
  and how well an ambiguous word's vector after each layer tells its senses apart (a probe in
  the spirit of Tenney et al. 2019, "BERT rediscovers the classical NLP pipeline").

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
    "SENSE_SENTENCES",
    "TECHNOLOGY_ANCHORS",
    "DiagonalCount",
    "ReferenceComparison",
    "anchor_points",
    "attention_locality",
    "compare_with_reference",
    "diagonal_count",
    "group_similarity",
    "head_roles",
    "sense_separation",
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


def _word_pieces(record: AttentionRecord) -> list[int]:
    """Positions of the record's word pieces: every token but ``[CLS]`` and ``[SEP]``."""
    return [t for t, token in enumerate(record.tokens) if token not in (CLS_TOKEN, SEP_TOKEN)]


def _record_weights(record: AttentionRecord) -> np.ndarray:
    """A record's attention weights as floats ``(L, H, T, T)``, or a ``ValueError``."""
    weights = np.asarray(record.weights, dtype=float)
    if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(
            f"record {record.label!r}: weights must have shape (L, H, T, T), got {weights.shape}"
        )
    return weights


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
        weights = _record_weights(record)  # (L, H, T, T)
        pieces = _word_pieces(record)
        special = [t not in pieces for t in range(len(record.tokens))]
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
    on_both: int = 0  # rows of [CLS] or [SEP] whose largest weight is on itself: in both counts
    word_rows: int = 0  # rows of word pieces (not [CLS] or [SEP])
    word_chance: float = 0.0  # share of word-piece rows a random largest weight puts on itself
    among_pieces: int = 0  # word-piece rows whose largest weight among word pieces is on itself
    among_pieces_chance: float = 0.0  # the same share for a random word piece: mean 1 / pieces

    @property
    def self_share(self) -> float:
        return self.on_self / self.rows

    @property
    def special_share(self) -> float:
        return self.on_special / self.rows

    @property
    def both_share(self) -> float:
        return self.on_both / self.rows

    @property
    def word_self_share(self) -> float:
        """Share of the word-piece rows whose largest weight is on the piece itself."""
        return (self.on_self - self.on_both) / self.word_rows

    @property
    def among_pieces_share(self) -> float:
        """Share of the word-piece rows whose largest weight *among the word pieces* (the
        ``[CLS]`` and ``[SEP]`` keys left out) is on the piece itself."""
        return self.among_pieces / self.word_rows


def diagonal_count(records: Sequence[AttentionRecord]) -> DiagonalCount:
    """Test "every token pays most attention to itself" on real weights.

    For each record (one sentence, weights ``(L, H, T, T)``, every record of the same model),
    every query row of every layer and head: is its largest weight on the token itself (a tie
    does not count: ``embedding_shift.favours_self``), and is it on ``[CLS]`` or
    ``[SEP]``? A row of ``[CLS]`` or ``[SEP]`` that favours itself counts in both, and in
    ``on_both``; ``word_rows`` and ``word_chance`` count the word-piece rows alone.
    ``among_pieces`` asks the same of the word-piece rows with the ``[CLS]`` and ``[SEP]`` keys
    left out, so that the sink tokens cannot win; its chance is 1 / (number of word pieces).
    """
    if len(records) == 0:
        raise ValueError("records is empty: give at least one sentence's attention")
    rows = on_self = on_special = on_both = word_rows = among_pieces = 0
    chance = word_chance = among_pieces_chance = 0.0
    head_counts: np.ndarray | None = None
    for record in records:
        weights = _record_weights(record)  # (L, H, T, T)
        if head_counts is not None and weights.shape[:2] != head_counts.shape:
            raise ValueError(
                f"record {record.label!r}: (L, H) = {weights.shape[:2]}, the first record has "
                f"{head_counts.shape}: count one model at a time"
            )
        length = weights.shape[-1]
        on_itself = favours_self(weights)  # (L, H, T)
        pieces = _word_pieces(record)
        special = [i for i in range(length) if i not in pieces]
        strongest = weights.argmax(axis=-1)  # (L, H, T); a tie goes to the first key
        counts = on_itself.sum(axis=-1)  # (L, H)
        head_counts = counts if head_counts is None else head_counts + counts
        rows += on_itself.size
        on_self += int(on_itself.sum())
        on_special += int(np.isin(strongest, special).sum())
        on_both += int(on_itself[..., special].sum())  # (L, H, T) -> the special tokens' rows
        chance += on_itself.size / length  # each of the T rows: 1 chance in T
        words = on_itself.size // length * (length - len(special))  # L * H * (T - specials)
        word_rows += words
        word_chance += words / length
        if pieces:
            among = weights[..., pieces, :][..., pieces]  # (L, H, n, n): n pieces to pieces only
            among_pieces += int(favours_self(among).sum())
            among_pieces_chance += words / len(pieces)  # each row: 1 chance in n
    head_rows = rows / head_counts.size  # the same number of rows in every head
    head_shares = head_counts / head_rows
    return DiagonalCount(
        rows,
        on_self,
        on_special,
        chance / rows,
        head_shares,
        on_both,
        word_rows,
        word_chance / word_rows if word_rows else 0.0,
        among_pieces,
        among_pieces_chance / word_rows if word_rows else 0.0,
    )


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
    # p: the word's pieces
    vectors = run.hidden(0)[:, positions].mean(dim=1)  # (L + 1, p, D) -> (L + 1, D)
    similarity = group_similarity(vectors, anchors, groups)
    trajectory = np.stack([similarity[group] for group in groups], axis=1)  # (L + 1, 2)
    looked = run.weights(0)[:, :, positions].mean(axis=(0, 1, 2))  # (L, H, p, T) -> (T,)
    return ShiftRecord(label or sentence, word, trajectory, run.tokens(0), looked)


def attention_locality(records: Sequence[AttentionRecord]) -> dict[str, np.ndarray]:
    """Layer by layer, how near the heads look: ``{measure: (L,)}``, pooled over every head
    and over the word-piece queries (not ``[CLS]`` or ``[SEP]``) of every record.

    - ``"on [CLS] and [SEP]"``: the share of the rows' weight on the two special tokens;
    - ``"adjacent"``: of the weight the rows put on word pieces, the share on the pieces at
      distance 1 (``|i - j| = 1``);
    - ``"mean distance"``: the mean ``|i - j|`` over word-piece keys, weighted by that weight;
    - ``"adjacent (even)"`` and ``"mean distance (even)"``: the same two if every row spread
      its word-piece weight evenly over the sentence's word pieces: no preference for nearby.

    The last four count word-piece keys only, so that ``[CLS]``, the parking spot of most
    heads and far from most queries, does not read as long-range attention.
    """
    if len(records) == 0:
        raise ValueError("records is empty: give at least one sentence's attention")
    layers = None
    sums = {}  # measure -> (L,)
    for record in records:
        weights = _record_weights(record)  # (L, H, T, T)
        if layers is not None and weights.shape[0] != layers:
            raise ValueError(
                f"record {record.label!r} has {weights.shape[0]} layers, the first {layers}"
            )
        layers = weights.shape[0]
        pieces = _word_pieces(record)
        if not pieces:
            raise ValueError(f"record {record.label!r} has no word piece between [CLS] and [SEP]")
        rows = weights[:, :, pieces]  # (L, H, n, T): the n word-piece queries
        on_pieces = rows[..., pieces]  # (L, H, n, n): ... and word-piece keys
        distance = np.abs(np.subtract.outer(pieces, pieces)).astype(float)  # (n, n): |i - j|
        adjacent = distance == 1
        mass = on_pieces.sum(axis=-1)  # (L, H, n): each row's weight on word pieces
        even_adjacent = adjacent.mean(axis=-1)  # (n,): k neighbours of n pieces -> k / n
        even_distance = distance.mean(axis=-1)  # (n,)
        parts = {
            "rows": np.full(layers, rows.shape[1] * rows.shape[2], dtype=float),
            "on [CLS] and [SEP]": (rows.sum(axis=-1) - mass).sum(axis=(1, 2)),
            "piece weight": mass.sum(axis=(1, 2)),
            "adjacent": (on_pieces * adjacent).sum(axis=(1, 2, 3)),
            "mean distance": (on_pieces * distance).sum(axis=(1, 2, 3)),
            "adjacent (even)": (mass * even_adjacent).sum(axis=(1, 2)),
            "mean distance (even)": (mass * even_distance).sum(axis=(1, 2)),
        }
        for name, value in parts.items():
            sums[name] = sums[name] + value if name in sums else value
    result = {"on [CLS] and [SEP]": sums["on [CLS] and [SEP]"] / sums["rows"]}
    for name in ("adjacent", "adjacent (even)", "mean distance", "mean distance (even)"):
        result[name] = sums[name] / sums["piece weight"]
    return result


SENSE_SENTENCES = {  # word -> sense -> sentences using the word in that sense
    "apple": {
        "fruit": (
            "She sliced the apple and ate it with cheese",
            "I ate an apple and a banana for lunch",
            "An apple a day keeps the doctor away",
            "The apple tree in our garden is full of blossom",
        ),
        "company": (
            "Apple released a new iPhone and a faster laptop",
            "He updated the software on his Apple computer",
            "Apple shares rose after the product launch",
            "My Apple watch needs charging every night",
        ),
    },
    "bank": {
        "river": (
            "We had a picnic on the bank of the river",
            "The boat drifted toward the muddy bank",
            "Fish hide under the grassy bank of the stream",
            "Reeds grow along the bank of the lake",
        ),
        "money": (
            "I deposited my salary at the bank",
            "The bank approved her loan on Monday",
            "He works as a teller at a bank downtown",
            "The bank raised its interest rates again",
        ),
    },
}


def sense_separation(vectors: Mapping[str, Sequence[torch.Tensor]]) -> dict[str, np.ndarray]:
    """Layer by layer, how well one word's vectors tell its senses apart.

    ``vectors`` maps each sense (at least two) to the word's vectors in at least two sentences
    using it in that sense, each ``(L + 1, D)`` (:meth:`PretrainedEncoder.word_vectors`).
    Returns ``{measure: (L + 1,)}``:

    - ``"same sense"``: mean cosine similarity of two of the word's vectors from different
      sentences of the same sense; ``"other sense"``: from sentences of different senses;
      ``"separation"``: the first minus the second;
    - ``"nearest sense"``: the share of sentences whose vector is more similar, on average, to
      the other sentences of its own sense than to those of any other sense (leave one out).
    """
    if len(vectors) < 2:
        raise ValueError(f"vectors must hold at least two senses, got {list(vectors)}")
    labels, rows = [], []
    for sense, group in vectors.items():
        if len(group) < 2:
            raise ValueError(f"sense {sense!r} needs at least two sentences, got {len(group)}")
        labels += [sense] * len(group)
        rows += list(group)
    shapes = {tuple(row.shape) for row in rows}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"every vector must have the same shape (L + 1, D), got {shapes}")
    stacked = torch.nn.functional.normalize(torch.stack(rows).double(), dim=-1)  # (N, L + 1, D)
    cosine = torch.einsum("ild,jld->lij", stacked, stacked).numpy()  # (L + 1, N, N)
    labels = np.array(labels)
    same = labels[:, None] == labels[None, :]  # (N, N)
    other = ~same
    np.fill_diagonal(same, False)  # a sentence is not compared with itself
    result = {
        "same sense": cosine[:, same].mean(axis=-1),
        "other sense": cosine[:, other].mean(axis=-1),
    }
    result["separation"] = result["same sense"] - result["other sense"]
    nearest = np.zeros(cosine.shape[0])  # (L + 1,): sentences placed with their own sense
    for i, sense in enumerate(labels):
        others = np.arange(len(labels)) != i  # leave sentence i out
        score = {  # sense -> (L + 1,): mean similarity to that sense's other sentences
            name: cosine[:, i, (labels == name) & others].mean(axis=-1)
            for name in dict.fromkeys(labels)
        }
        rival = np.max([value for name, value in score.items() if name != sense], axis=0)
        nearest += score[sense] > rival
    result["nearest sense"] = nearest / len(labels)
    return result
