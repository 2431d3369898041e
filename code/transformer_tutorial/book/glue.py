"""Numbers the prose quotes, handed from a code cell to a sentence.

A code cell computes ``share`` and calls ``glue("apple share", share, ".2f")``; the chapter's
markdown writes ``{glue:text}`apple share``` and the built page shows the number, printed the
way the cell said. This wrapper of ``myst_nb.glue`` adds what the book needs on top:

- the cell, not the sentence, says how the number is printed, and the notebook stores the
  printed text (``'0.59'``), not the full float. The digits after the tenth or so are not the
  same on every processor (sums run in other orders): stored in full, they would make the
  committed notebook differ from a run on another computer in digits no reader ever sees, while
  the printed text changes only if what the reader sees changes;
- nothing is displayed in the notebook: the number appears in the sentence, not twice;
- NumPy and PyTorch scalars are accepted (they are printed as Python numbers);
- a name may not hold ``:`` (MyST would read what follows as a format).
"""

import numbers

import myst_nb

__all__ = ["glue"]


def glue(name: str, value: object, fmt: str = "") -> None:
    """Store ``value`` printed with ``fmt`` (e.g. ``".2f"``, ``".1%"``, ``",.0f"``) under
    ``name``, for ``{glue:text}`name``` in the chapter's prose. Without ``fmt``, ``value``
    must be an int or a string, which print the same everywhere."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"a glue name is a non-empty string without ':', got {name!r}")
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        value = value.item()  # NumPy or PyTorch scalar -> Python number
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise TypeError(f"glue {name!r}: a number or a string, got {type(value).__name__}")
    if fmt:
        value = format(value, fmt)
    elif isinstance(value, float):
        raise ValueError(f"glue {name!r}: say how the float {value!r} is printed, e.g. '.2f'")
    myst_nb.glue(name, value, display=False)
