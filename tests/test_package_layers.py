"""The package is layered like the book, and imports only run downward.

``model`` (the Transformer the reader builds) < ``studies`` (what the chapters measure) <
``views`` (how results are drawn) < ``book`` (the notebook runner, the Sphinx extension). A module
may import its own layer and the layers below it, never one above: the model imports no study,
no view, no book tooling. Imports are read from the source (every ``import``, also inside
functions and ``if TYPE_CHECKING:`` blocks), so a lazy import cannot hide a dependency.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "code" / "transformer_tutorial"
LAYERS = ("model", "studies", "views", "book")  # lowest first


def _layer(module: str) -> str | None:
    """``transformer_tutorial.model.attention`` -> ``"model"``; ``None`` outside the layers."""
    parts = module.split(".")
    if parts[0] != "transformer_tutorial" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else None


def imported_modules(source: str, module: str) -> set[str]:
    """Every ``transformer_tutorial`` module that ``source`` (the module ``module``) imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import, resolved against the importing module
                base = ".".join([*module.split(".")[: -node.level], *filter(None, [base])])
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("transformer_tutorial")}


def violations(source: str, module: str) -> list[str]:
    """The imports of ``module`` that reach a higher layer than its own."""
    own = LAYERS.index(_layer(module))
    return sorted(
        name
        for name in imported_modules(source, module)
        if _layer(name) is not None and LAYERS.index(_layer(name)) > own
    )


def _modules() -> list[tuple[str, Path]]:
    modules = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return modules


def test_every_module_belongs_to_a_layer():
    stray = [name for name, _ in _modules() if name != "transformer_tutorial" and not _layer(name)]
    assert stray == [], f"modules outside model/, studies/, views/, book/: {stray}"


@pytest.mark.parametrize("name,path", _modules(), ids=lambda value: str(value))
def test_imports_run_downward(name, path):
    if name == "transformer_tutorial":
        return  # the package's front door may re-export from any layer (set_seed)
    assert violations(path.read_text(), name) == []


@pytest.mark.parametrize(
    "source",
    [
        "from transformer_tutorial.studies.records import AttentionRecord",
        "import transformer_tutorial.views.plots",
        "def f():\n    from transformer_tutorial.views import explorers",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..book.seed import set_seed",
        "from transformer_tutorial import studies",
    ],
)
def test_an_upward_import_in_the_model_is_found(source):
    assert violations(source, "transformer_tutorial.model.attention") != []


def test_downward_and_sideways_imports_are_allowed():
    source = (
        "from transformer_tutorial.model.attention import softmax\n"
        "from transformer_tutorial.studies import records\n"
        "from . import toy_tasks\n"
    )
    assert violations(source, "transformer_tutorial.studies.real_model") == []
