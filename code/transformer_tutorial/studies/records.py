"""What a study hands to a view: plain records of measured numbers, with no drawing code.

The explorers in :mod:`transformer_tutorial.views.explorers` draw these; the studies and the
pretrained-model measurements fill them. Keeping them here lets imports run one way only:
views import studies, never the reverse.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["AnchorPoint", "AttentionRecord", "ShiftRecord"]


@dataclass
class AttentionRecord:
    """Attention weights of one sentence, for every layer and head of a model."""

    label: str  # shown in the sentence/preset menu
    tokens: list[str]  # query tokens, length T
    weights: np.ndarray  # (layers, heads, T, S), each row sums to 1
    key_tokens: list[str] | None = None  # length S; None means the same as tokens (self-attention)
    layer_names: list[str] | None = None  # None -> "layer 1".."layer N"
    model: str | None = None  # which model; records of different models may differ in shape

    @property
    def keys(self) -> list[str]:
        return list(self.tokens if self.key_tokens is None else self.key_tokens)

    @property
    def names(self) -> list[str]:
        layers = np.shape(self.weights)[0]
        if self.layer_names is None:
            return [f"layer {index + 1}" for index in range(layers)]
        return list(self.layer_names)


@dataclass
class AnchorPoint:
    """A reference word drawn as a labelled dot: it does not move."""

    word: str
    group: str  # e.g. "fruit" or "technology": the dot's colour and legend entry
    point: tuple[float, float]


@dataclass
class ShiftRecord:
    """One sentence: where the word starts (static) and where attention takes it."""

    label: str  # shown in the preset menu
    word: str  # the word that moves, e.g. "apple"
    trajectory: np.ndarray  # (n >= 2, 2): static point, [after each layer...], contextual point
    tokens: list[str] | None = None  # the sentence, to show the word's attention over it
    attention: np.ndarray | None = None  # (T,) the word's weights over the tokens, sum 1
