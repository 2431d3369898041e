"""The book's one matplotlib style, and the figure helpers every chapter shares.

Colour choices are colour-blind safe: ``cividis`` for quantities that only grow (weights,
norms), ColorBrewer's purple-orange for signed quantities centred on zero, and the Okabe-Ito
palette for categories. Figures return ``(figure, axes)`` so a notebook can add to them.
"""

from collections.abc import Mapping, Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = [
    "DIVERGING",
    "OKABE_ITO",
    "SEQUENTIAL",
    "heatmap",
    "line_plot",
    "use_book_style",
]

SEQUENTIAL = "cividis"  # perceptually uniform, readable with every colour-vision deficiency
# ColorBrewer's colour-blind-safe PuOr, reversed so that purple is below zero and orange above,
# as in Vega's "purpleorange" used by the explorers (matplotlib's "PuOr" runs orange -> purple).
DIVERGING = "PuOr_r"
OKABE_ITO = (  # Okabe & Ito (2008): eight colours distinguishable under colour blindness
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#F0E442",
    "#000000",
)

BOOK_STYLE = {
    "figure.figsize": (7.0, 3.6),
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": mpl.cycler(color=OKABE_ITO),
    "image.cmap": SEQUENTIAL,
    "legend.frameon": False,
    "svg.hashsalt": "transformer-tutorial",  # stable ids if a figure is ever saved as SVG
}


def use_book_style() -> None:
    """Apply the book's style to every figure drawn from now on."""
    mpl.rcParams.update(BOOK_STYLE)


def heatmap(
    matrix: np.ndarray,
    *,
    ax: Axes | None = None,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    x_title: str = "",
    y_title: str = "",
    title: str = "",
    colorbar_label: str = "",
    diverging: bool = False,
    limits: tuple[float, float] | None = None,
    annotate: bool = False,
    decimals: int = 2,
) -> tuple[Figure, Axes]:
    """Draw a matrix as coloured cells: row ``r`` at height ``r``, column ``c`` across.

    ``diverging=True`` centres the colour scale on zero (symmetric limits unless given);
    ``annotate=True`` writes each value in its cell, for matrices small enough to read.
    """
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2 or 0 in matrix.shape:
        raise ValueError(f"matrix must be 2-D and non-empty, got shape {matrix.shape}")
    for name, labels, size in (
        ("x_labels", x_labels, matrix.shape[1]),
        ("y_labels", y_labels, matrix.shape[0]),
    ):
        if labels is not None and len(labels) != size:
            raise ValueError(f"{name} has {len(labels)} entries for {size} cells")
    if ax is None:
        _, ax = plt.subplots()
    if limits is None:
        if diverging:
            reach = float(np.abs(matrix).max()) or 1.0
            limits = (-reach, reach)
        else:
            limits = (float(matrix.min()), float(matrix.max()))
    image = ax.imshow(
        matrix,
        cmap=DIVERGING if diverging else SEQUENTIAL,
        vmin=limits[0],
        vmax=limits[1],
        aspect="auto",
        interpolation="nearest",
    )
    colorbar = ax.figure.colorbar(image, ax=ax)
    colorbar.set_label(colorbar_label)
    if x_labels is not None:
        ax.set_xticks(range(len(x_labels)), x_labels, rotation=45 if len(x_labels) > 6 else 0)
    if y_labels is not None:
        ax.set_yticks(range(len(y_labels)), y_labels)
    if annotate:
        middle = (limits[0] + limits[1]) / 2
        for (row, column), value in np.ndenumerate(matrix):
            # dark text on the light middle of the scale, light text on its dark ends
            light = (value < middle) if not diverging else abs(value) > 0.6 * limits[1]
            ax.text(
                column,
                row,
                f"{value:.{decimals}f}",
                ha="center",
                va="center",
                fontsize=8,
                color="white" if light else "black",
            )
    ax.set(xlabel=x_title, ylabel=y_title, title=title)
    ax.spines[:].set_visible(False)
    return ax.figure, ax


def line_plot(
    x: np.ndarray,
    curves: Mapping[str, np.ndarray],
    *,
    ax: Axes | None = None,
    x_title: str = "",
    y_title: str = "",
    title: str = "",
    marker: str | None = None,
) -> tuple[Figure, Axes]:
    """One line per entry of ``curves`` (label -> y values over ``x``), in the book's palette."""
    x = np.asarray(x)
    if not curves:
        raise ValueError("curves is empty: give at least one label -> values entry")
    if ax is None:
        _, ax = plt.subplots()
    for label, values in curves.items():
        values = np.asarray(values)
        if values.shape != x.shape:
            raise ValueError(f"curve {label!r} has shape {values.shape}, x has {x.shape}")
        ax.plot(x, values, label=label, marker=marker, markersize=3)
    ax.set(xlabel=x_title, ylabel=y_title, title=title)
    if len(curves) > 1:
        ax.legend()
    return ax.figure, ax
