"""What chapter "Positional encoding" proves about the sinusoidal table, as functions to check.

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.5, which chose sinusoids
because "for any fixed offset k, PE_{pos+k} can be represented as a linear function of PE_pos".

- :func:`similarity_by_distance`: ``PE(p) . PE(q)`` depends only on ``p - q``;
- :func:`rotation_matrix`: the linear function is a fixed rotation ``M_k``, the same at every
  position;
- :func:`sinusoidal_encoding_concatenated` and :func:`concatenated_to_interleaved`: the
  ``[sin | cos]`` layout of some figures and libraries holds the same numbers, reordered;
- :func:`tensor2tensor_encoding`: the authors' own code (tensor2tensor's
  ``get_timing_signal_1d``) uses that layout with slightly different frequencies, so its table
  is *not* a reordering of the paper's.

The table itself is :func:`~transformer_tutorial.model.positions.sinusoidal_encoding`.
"""

import numpy as np

from transformer_tutorial.model.checks import check_positive_int
from transformer_tutorial.model.positions import frequencies

__all__ = [
    "concatenated_to_interleaved",
    "rotation_matrix",
    "similarity_by_distance",
    "sinusoidal_encoding_concatenated",
    "tensor2tensor_encoding",
]


def similarity_by_distance(distance: np.ndarray | int, d_model: int, base: float = 10000.0):
    """``PE(p) . PE(q)`` as a function of ``distance = p - q`` alone.

    Each pair contributes ``sin(a)sin(b) + cos(a)cos(b) = cos(a - b)``, so the dot product is
    ``sum_i cos(omega_i * (p - q))``: it never looks at ``p`` or ``q`` on their own.
    Returns an array shaped like ``distance``; the value at distance 0 is ``D / 2``.
    """
    distance = np.asarray(distance, dtype=float)
    omega = frequencies(d_model, base)  # (D/2,)
    angles = distance[..., None] * omega  # (...) -> (..., D/2): one angle difference per pair
    return np.cos(angles).sum(axis=-1)  # (..., D/2) -> (...)


def rotation_matrix(shift: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The fixed matrix ``M_k`` with ``PE[pos + k] = M_k @ PE[pos]`` for every ``pos``.

    It is block diagonal: pair ``i`` is rotated by the angle ``a = k * omega_i``,
    ``[sin, cos] -> [[cos a, sin a], [-sin a, cos a]] @ [sin, cos]``. Because ``M_k`` does not
    depend on ``pos``, a shift by ``k`` positions looks the same everywhere in the sequence.
    Shape ``(D, D)``.
    """
    angles = shift * frequencies(d_model, base)  # (D/2,): a = k * omega_i for each pair
    cos, sin = np.cos(angles), np.sin(angles)
    matrix = np.zeros((d_model, d_model))  # (D, D)
    matrix[0::2, 0::2] = np.diag(cos)  # new sine   = sin * cos(a) + cos * sin(a)
    matrix[0::2, 1::2] = np.diag(sin)
    matrix[1::2, 0::2] = np.diag(-sin)  # new cosine = cos * cos(a) - sin * sin(a)
    matrix[1::2, 1::2] = np.diag(cos)
    return matrix


def sinusoidal_encoding_concatenated(
    max_len: int, d_model: int, base: float = 10000.0
) -> np.ndarray:
    """The ``[sin | cos]`` layout some figures and libraries use: all sines first, then all cosines.

    It holds exactly the same numbers as ``sinusoidal_encoding``, in another column order
    (see :func:`concatenated_to_interleaved`). Shape ``(P, D)``.
    """
    check_positive_int("max_len", max_len)
    angles = np.arange(max_len)[:, None] * frequencies(d_model, base)[None, :]  # (P, D/2)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # (P, D/2 + D/2) = (P, D)


def concatenated_to_interleaved(d_model: int) -> np.ndarray:
    """Column order that turns the ``[sin | cos]`` table into the paper's interleaved one.

    ``sinusoidal_encoding_concatenated(P, D)[:, order] == sinusoidal_encoding(P, D)``.
    """
    _check_even_d_model(d_model)
    half = d_model // 2  # D/2 pairs
    order = np.empty(d_model, dtype=np.int64)  # (D,)
    order[0::2] = np.arange(half)  # the sine of pair i sits in column i of [sin | cos]
    order[1::2] = half + np.arange(half)  # its cosine in column half + i
    return order


def tensor2tensor_encoding(
    max_len: int, d_model: int, min_timescale: float = 1.0, max_timescale: float = 1.0e4
) -> np.ndarray:
    """The table of tensor2tensor's ``get_timing_signal_1d`` (Vaswani et al. 2018): ``[sin | cos]``.

    Its ``D/2`` frequencies run geometrically from ``1 / min_timescale`` to ``1 / max_timescale``
    *inclusive*: ``omega_i = 10000^(-i / (D/2 - 1))``, where the paper has
    ``10000^(-2i / D)``, which stops short of ``1 / 10000``. Pair 0 is the same; every later
    pair turns a little slower. Shape ``(P, D)``.
    """
    check_positive_int("max_len", max_len)
    _check_even_d_model(d_model)
    half = d_model // 2  # D/2 frequencies
    increment = np.log(max_timescale / min_timescale) / max(half - 1, 1)  # log-spacing
    omega = np.exp(-increment * np.arange(half)) / min_timescale  # (D/2,): 1 ... 1/10000
    angles = np.arange(max_len)[:, None] * omega[None, :]  # (P, 1) * (1, D/2) -> (P, D/2)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # (P, D)


def _check_even_d_model(d_model: int) -> None:
    check_positive_int("d_model", d_model)
    if d_model % 2:
        raise ValueError(f"d_model must be even (a sine and a cosine per pair), got {d_model}")
