"""Tests for transformer_tutorial.views.plots: the shared style and figure helpers."""

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest

from transformer_tutorial.views import plots

mpl.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_style_uses_colour_blind_safe_defaults():
    with mpl.rc_context():
        plots.use_book_style()
        assert mpl.rcParams["image.cmap"] == "cividis"
        cycle = [c.lower() for c in mpl.rcParams["axes.prop_cycle"].by_key()["color"]]
        assert cycle == [c.lower() for c in plots.OKABE_ITO]


def test_heatmap_shows_the_matrix_with_labels():
    matrix = np.array([[0.1, 0.9], [0.5, 0.5], [1.0, 0.0]])
    fig, ax = plots.heatmap(matrix, x_labels=["a", "b"], y_labels=["x", "y", "z"], annotate=True)
    image = ax.images[0]
    np.testing.assert_array_equal(image.get_array(), matrix)
    assert image.get_cmap().name == plots.SEQUENTIAL
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y", "z"]
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"{v:.2f}" for v in matrix.flat)
    assert len(fig.axes) == 2  # the heatmap and its colour bar


def test_diverging_heatmap_is_centred_on_zero():
    _, ax = plots.heatmap(np.array([[-0.5, 2.0]]), diverging=True)
    image = ax.images[0]
    assert image.get_cmap().name == plots.DIVERGING
    assert image.norm.vmin == -2.0 and image.norm.vmax == 2.0


def test_heatmap_rejects_bad_input():
    with pytest.raises(ValueError, match="2-D and non-empty"):
        plots.heatmap(np.zeros(3))
    with pytest.raises(ValueError, match="x_labels has 3 entries for 2 cells"):
        plots.heatmap(np.zeros((2, 2)), x_labels=["a", "b", "c"])


def test_line_plot_draws_one_line_per_curve():
    x = np.arange(5)
    _, ax = plots.line_plot(x, {"up": x * 1.0, "down": -x * 1.0}, x_title="step")
    assert [line.get_label() for line in ax.lines] == ["up", "down"]
    np.testing.assert_array_equal(ax.lines[1].get_ydata(), -x)
    assert ax.get_xlabel() == "step"
    with pytest.raises(ValueError, match="curve 'bad' has shape"):
        plots.line_plot(x, {"bad": np.zeros(3)})
    with pytest.raises(ValueError, match="curves is empty"):
        plots.line_plot(x, {})
