"""What the division by ``sqrt(d_k)`` protects: the softmax's gradient, measured.

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1: for large ``d_k``
"the dot products grow large in magnitude, pushing the softmax function into regions where it
has extremely small gradients". Chapter "Self-attention" measures both halves of that sentence:
the spread of ``q . k`` (:func:`~transformer_tutorial.model.attention.dot_product_std`, in the
model's file because chapter "Multi-head attention" quotes it too) and, here, what an unscaled
spread does to the softmax.
"""

import numpy as np

from transformer_tutorial.model.attention import softmax
from transformer_tutorial.model.checks import check_positive_int

__all__ = ["softmax_saturation"]


def softmax_saturation(
    d_k: int, *, scaled: bool, rows: int = 1000, keys: int = 10, seed: int = 0
) -> tuple[float, float]:
    """What unscaled scores do to the softmax, measured: ``(largest weight, gradient size)``.

    For ``rows`` queries, each scored against ``keys`` random keys (entries standard normal,
    width ``d_k``), returns the mean of each row's largest weight and the mean Frobenius norm of
    the softmax's Jacobian ``diag(p) - p p^T``, which is how strongly the weights respond to
    the scores. As ``p`` nears one-hot the Jacobian nears zero and learning stalls; dividing by
    ``sqrt(d_k)`` (``scaled=True``) keeps both numbers the same at every width.
    """
    for name, value in (("d_k", d_k), ("rows", rows), ("keys", keys)):
        check_positive_int(name, value)
    rng = np.random.default_rng(seed)
    queries = rng.standard_normal((rows, 1, d_k))  # (N, 1, K): one query per row
    key_vectors = rng.standard_normal((rows, keys, d_k))  # (N, S, K)
    scores = (queries @ key_vectors.transpose(0, 2, 1))[:, 0]  # (N, 1, S) -> (N, S)
    if scaled:
        scores = scores / np.sqrt(d_k)
    weights = softmax(scores)  # (N, S)
    p_column, p_row = weights[:, :, None], weights[:, None, :]  # (N, S, 1) and (N, 1, S)
    jacobian = p_column * np.eye(keys) - p_column * p_row  # diag(p) - p p^T: (N, S, S)
    largest_weight = weights.max(axis=1).mean()
    gradient_size = np.linalg.norm(jacobian, axis=(1, 2)).mean()
    return float(largest_weight), float(gradient_size)
