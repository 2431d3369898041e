"""One place that seeds every random number generator the book uses.

Library functions never touch global random state: they take a ``seed`` or a generator.
Notebooks call :func:`set_seed` once at the top so that whatever *they* draw is reproducible.
"""

import random

import numpy as np
import torch


def set_seed(seed: int) -> np.random.Generator:
    """Seed Python's, NumPy's and PyTorch's global generators and return a fresh NumPy generator.

    Also limits PyTorch to one thread: reductions then run in a fixed order, so printed numbers
    are the same on every machine with the same library versions.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - third-party code may still use the legacy global state
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    return np.random.default_rng(seed)
