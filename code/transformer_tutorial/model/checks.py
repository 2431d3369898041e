"""Argument checks shared by every module, so the same mistake gets the same message everywhere."""

import numpy as np

__all__ = ["check_positive_int"]


def check_positive_int(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is an int (or NumPy integer) above zero.

    ``True`` is an int to Python but never a size, so booleans are refused too.
    """
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
