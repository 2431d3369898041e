"""The book's pretrained encoder, exported to ONNX so that it runs in the reader's browser.

Chapter 10 runs all-MiniLM-L6-v2 on the book's own :class:`EncoderOnly`. This module turns that
same model into files a web page can load with ONNX Runtime Web:

1. :class:`BrowserEncoder` wraps the model so that one call returns what the explorers draw:
   every layer's attention weights ``(L, H, T, T)`` and every layer's token vectors
   ``(L + 1, T, D)``, for one sentence of token IDs ``(1, T)``.
2. :func:`export_onnx` traces it into an ONNX graph (float32, about 90 MB) with a dynamic
   sequence length ``T`` from 1 to 512.
3. :func:`shrink` stores the big weight matrices as 8-bit integers with a scale per block
   (about 24 MB): the graph turns them back into float32 when it runs, and every other
   number stays float32, so only the weights are rounded, never the activations.
4. :func:`write_browser_files` writes the shrunk model, the tokenizer's ``vocab.txt``, the
   apple explorer's anchor-word vectors and a manifest (sizes, SHA-256, the model's shape and
   the error measured against the PyTorch model) into one directory, byte for byte the same on
   every run.
5. :func:`setup` makes this module a Sphinx extension: after an HTML build it writes those
   files into ``_static/encoder/``, beside the two scripts that run them (:data:`PAGE_SCRIPTS`:
   ``typed.js``, the "type any sentence" box, and ``wordpiece.js``, the tokenizer), and it adds
   ``typed.js`` to each page with a placeholder ``<div class="tt-typed"></div>``, only those.

Why the TorchScript exporter (``dynamo=False``): the ``torch.export``-based exporter refuses the
book's model, whose embedding layer checks its IDs with ``ids.min() < 0`` (a branch on data,
which ``torch.export`` cannot trace). Tracing records the one path the check takes for valid
IDs and keeps ``T`` symbolic, and the traced graph agrees with PyTorch within float32 rounding
(the tests check it at 1, 3, 17, 64 and 512 tokens).

Why not ``onnxruntime.quantization.quantize_dynamic``: it also rounds the *activations* to 8
bits at every matrix product, and on this model that moved attention weights by up to 0.7 and
left last-layer token vectors with a cosine of 0.72 to the originals (measured). Rounding only
the weights, in blocks of 64, keeps the attention weights within a few hundredths.

Shapes use the package notation: ``T`` tokens, ``D`` = ``d_model`` (384), ``H`` heads (12),
``L`` layers (6); ``V`` the vocabulary (30522).
"""

import hashlib
import io
import json
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from transformer_tutorial.model.checkpoint import PretrainedEncoder, load_pretrained
from transformer_tutorial.model.transformer import EncoderOnly
from transformer_tutorial.studies.real_model import (
    FRUIT_ANCHORS,
    TECHNOLOGY_ANCHORS,
    anchor_points,
)

__all__ = [
    "ANCHORS_FILE",
    "BLOCK",
    "FILES",
    "MANIFEST_FILE",
    "MODEL_FILE",
    "OPSET",
    "PAGE_SCRIPTS",
    "SENTENCES",
    "BrowserEncoder",
    "anchor_data",
    "check_ids",
    "compare",
    "export_onnx",
    "measurement_inputs",
    "onnx_session",
    "run_onnx",
    "setup",
    "shrink",
    "write_browser_files",
]

MODEL_FILE = "encoder.int8.onnx"  # the shrunk graph the page loads
VOCAB_FILE = "vocab.txt"  # the WordPiece vocabulary, one token a line; line n is ID n
ANCHORS_FILE = "anchors.json"  # the apple explorer's anchor words, their vectors at every layer
MANIFEST_FILE = "manifest.json"  # what is in the directory, and how close the shrunk model is
FILES = (MODEL_FILE, VOCAB_FILE, ANCHORS_FILE, MANIFEST_FILE)

OPSET = 17  # ONNX operator set: every operator used is in ONNX Runtime Web's CPU (WASM) backend
BLOCK = 64  # weights sharing one scale in shrink(): 64 consecutive inputs of one output column

# The error of the shrunk model is measured on these, and on seeded random sentences.
SENTENCES = (
    "I ate an apple and a banana",
    "Apple released a new iPhone",
    "The animal didn't cross the street because it was too tired",
)
RANDOM_LENGTHS = (5, 30, 120, 510)  # word pieces between [CLS] and [SEP]; 510 fills all 512
RANDOM_SEED = 0


# ---------------------------------------------------------------------------------------------
# 1. One call, everything the explorers draw
# ---------------------------------------------------------------------------------------------


def check_ids(ids: torch.Tensor | np.ndarray, max_length: int = 512) -> None:
    """Raise ``ValueError`` unless ``ids`` is one sentence of 1 to ``max_length`` token IDs,
    an integer array of shape ``(1, T)``. (The ONNX graph itself cannot say why it fails.)"""
    shape = tuple(ids.shape)
    if isinstance(ids, torch.Tensor):
        integer = ids.dtype in (torch.int32, torch.int64)
    else:
        integer = np.issubdtype(ids.dtype, np.integer)
    if len(shape) != 2 or shape[0] != 1 or not integer:
        raise ValueError(
            f"ids must be one sentence of integer token IDs, shape (1, T); got {shape}"
        )
    if shape[1] == 0:
        raise ValueError("ids is empty (T = 0): a sentence has at least [CLS] and [SEP]")
    if shape[1] > max_length:
        raise ValueError(
            f"ids has {shape[1]} tokens, more than the model's {max_length} positions; "
            "shorten the text"
        )


class BrowserEncoder(nn.Module):
    """The book's :class:`EncoderOnly`, returning every layer's attention and vectors at once.

    It calls the model's own encoder stack (``Stack.forward``) with ``need_weights=True`` and
    every token marked real: one typed sentence has no padding, so even an ID that happens to
    be ``[PAD]`` is read as a token, and the mask, built from ``ids``, keeps ``T`` free in the
    traced graph.
    """

    def __init__(self, model: EncoderOnly):
        super().__init__()
        self.model = model.eval()
        self.config = model.config

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``ids`` ``(1, T)`` int64 -> ``attention`` ``(L, H, T, T)`` and ``hidden``
        ``(L + 1, T, D)``, both float32; ``hidden[0]`` is the embedding layer's output."""
        check_ids(ids, self.config.max_length)
        every_token = torch.ones_like(ids, dtype=torch.bool)  # (1, T)
        stack = self.model.encoder(ids, every_token, need_weights=True)
        return torch.cat(stack.self_attention), torch.cat(stack.hidden_states)
        # L x (1, H, T, T) -> (L, H, T, T); L + 1 x (1, T, D) -> (L + 1, T, D)


# ---------------------------------------------------------------------------------------------
# 2. The float32 graph
# ---------------------------------------------------------------------------------------------


def export_onnx(encoder: PretrainedEncoder, path: str | Path) -> None:
    """Trace :class:`BrowserEncoder` into an ONNX file at ``path``: input ``ids`` ``(1, T)``
    int64, outputs ``attention`` ``(L, H, T, T)`` and ``hidden`` ``(L + 1, T, D)``.

    The tracer names each transposed ``nn.Linear`` weight after a counter (``onnx::MatMul_1234``);
    they are renamed after the book's parameter (``....W_Q.weight.T``), which also makes two
    exports byte for byte the same.
    """
    import onnx

    wrapper = BrowserEncoder(encoder.model)
    example = torch.tensor([encoder.tokenizer.encode(SENTENCES[0]).ids])  # (1, T)
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        # The tracer warns at every `if` on a tensor (the argument checks): those branches are
        # recorded as taken for valid input, which is what the graph is for. It also warns that
        # the TorchScript exporter is deprecated (see the module docstring for why it is used).
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper,
            (example,),
            buffer,
            dynamo=False,
            opset_version=OPSET,
            input_names=["ids"],
            output_names=["attention", "hidden"],
            dynamic_axes={"ids": {1: "T"}, "attention": {2: "T", 3: "T"}, "hidden": {1: "T"}},
        )
    model = onnx.load_from_string(buffer.getvalue())
    _name_transposed_weights(model, wrapper)
    onnx.checker.check_model(model, full_check=True)
    Path(path).write_bytes(model.SerializeToString())


def _name_transposed_weights(model, wrapper: nn.Module) -> None:
    """Rename the graph's ``onnx::MatMul_*`` weights after the parameter they transpose."""
    from onnx import numpy_helper

    by_value = {
        parameter.detach().T.contiguous().numpy().tobytes(): f"{name}.T"
        for name, parameter in wrapper.named_parameters()
        if parameter.dim() == 2
    }
    renamed = {}
    for tensor in model.graph.initializer:
        if tensor.name.startswith("onnx::"):
            name = by_value.get(numpy_helper.to_array(tensor).tobytes())
            if name is None:
                raise ValueError(f"the exported graph has a weight {tensor.name!r} of no parameter")
            renamed[tensor.name] = name
            tensor.name = name
    for node in model.graph.node:
        for index, name in enumerate(node.input):
            if name in renamed:
                node.input[index] = renamed[name]


# ---------------------------------------------------------------------------------------------
# 3. 8-bit weights
# ---------------------------------------------------------------------------------------------


def _quantize(weights: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric 8-bit rounding: ``weights ~ q * scale`` with ``q`` in -127..127, one scale for
    the numbers along ``axis`` (the largest of them becomes +-127)."""
    largest = np.abs(weights).max(axis=axis, keepdims=True)
    scale = np.where(largest > 0, largest / 127, 1.0).astype(np.float32)
    q = np.clip(np.rint(weights / scale), -127, 127).astype(np.int8)
    return q, scale


def shrink(source: str | Path, target: str | Path, block: int = BLOCK) -> None:
    """Store the float32 graph at ``source`` with 8-bit weights at ``target``.

    - A weight matrix ``W`` ``(D_in, D_out)`` of a ``MatMul`` (every ``nn.Linear``) becomes
      ``q`` ``(D_in / block, block, D_out)`` int8 and ``scale`` ``(D_in / block, 1, D_out)``:
      each run computes ``reshape(float(q) * scale)`` and multiplies by that, in float32.
    - The token embedding table ``(V, D)`` keeps one scale per row: each run looks up the
      ``T`` rows of ``q`` and of ``scale`` it needs and multiplies them.
    - The position table (512 rows; its first row matters to every head of layer 0), the
      biases and the LayerNorm gains stay float32.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(source)
    graph = model.graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    nodes = []
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[1] in weights:  # x @ W, W a weight matrix
            name = node.input[1]
            w = numpy_helper.to_array(weights[name])  # (D_in, D_out)
            d_in, d_out = w.shape
            q, scale = _quantize(w.reshape(d_in // block, block, d_out), axis=1)
            graph.initializer.remove(weights.pop(name))
            graph.initializer.extend([
                numpy_helper.from_array(q, f"{name}.int8"),  # (D_in / block, block, D_out)
                numpy_helper.from_array(scale, f"{name}.scale"),  # (D_in / block, 1, D_out)
                numpy_helper.from_array(np.array(w.shape, np.int64), f"{name}.shape"),
            ])  # fmt: skip
            nodes += [
                helper.make_node("Cast", [f"{name}.int8"], [f"{name}.float"], to=TensorProto.FLOAT),
                helper.make_node("Mul", [f"{name}.float", f"{name}.scale"], [f"{name}.blocks"]),
                helper.make_node("Reshape", [f"{name}.blocks", f"{name}.shape"], [name]),
            ]  # int8 (D_in / block, block, D_out) -> float32 (D_in, D_out), then the MatMul
            nodes.append(node)
        elif node.op_type == "Gather" and node.input[0].endswith("embeddings.token.weight"):
            name = node.input[0]
            table = numpy_helper.to_array(weights[name])  # (V, D)
            q, scale = _quantize(table, axis=1)  # (V, D) int8, (V, 1)
            graph.initializer.remove(weights.pop(name))
            graph.initializer.extend([
                numpy_helper.from_array(q, f"{name}.int8"),
                numpy_helper.from_array(scale, f"{name}.scale"),
            ])  # fmt: skip
            ids, vectors = node.input[1], node.output[0]
            nodes += [
                helper.make_node("Gather", [f"{name}.int8", ids], [f"{vectors}.int8"]),
                helper.make_node("Gather", [f"{name}.scale", ids], [f"{vectors}.scale"]),
                helper.make_node(
                    "Cast", [f"{vectors}.int8"], [f"{vectors}.float"], to=TensorProto.FLOAT
                ),
                helper.make_node("Mul", [f"{vectors}.float", f"{vectors}.scale"], [vectors]),
            ]  # (1, T, D) int8 rows times their (1, T, 1) scales -> (1, T, D) float32
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model, full_check=True)
    Path(target).write_bytes(model.SerializeToString())


# ---------------------------------------------------------------------------------------------
# Running and comparing
# ---------------------------------------------------------------------------------------------


def onnx_session(path: str | Path, threads: int = 1):
    """An ONNX Runtime session on the CPU; one thread by default, so its sums always add up in
    the same order and the measured errors are the same on every run."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_onnx(session, ids: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` ``(1, T)`` -> ``attention`` ``(L, H, T, T)``, ``hidden`` ``(L + 1, T, D)``."""
    check_ids(ids)
    ids = np.asarray(ids, dtype=np.int64)
    attention, hidden = session.run(["attention", "hidden"], {"ids": ids})
    return attention, hidden


def measurement_inputs(encoder: PretrainedEncoder) -> list[torch.Tensor]:
    """:data:`SENTENCES` tokenized, then seeded random sentences of :data:`RANDOM_LENGTHS` word
    pieces (IDs from 1000 on: real word pieces, not [PAD] or [unused*]) between [CLS] and [SEP]."""
    inputs = [torch.tensor([encoder.tokenizer.encode(text).ids]) for text in SENTENCES]
    generator = torch.Generator().manual_seed(RANDOM_SEED)
    cls, sep = encoder.tokenizer.token_to_id("[CLS]"), encoder.tokenizer.token_to_id("[SEP]")
    for length in RANDOM_LENGTHS:
        pieces = torch.randint(1000, encoder.config.vocab_size, (1, length), generator=generator)
        inputs.append(torch.cat([torch.tensor([[cls]]), pieces, torch.tensor([[sep]])], dim=1))
    return inputs


def compare(
    session, encoder: PretrainedEncoder, inputs: Sequence[torch.Tensor]
) -> dict[str, float]:
    """How far the graph in ``session`` is from the book's PyTorch model on ``inputs``:
    the largest attention-weight difference (any layer, head, query, key), and the smallest
    cosine similarity between a token's last-layer vectors."""
    wrapper = BrowserEncoder(encoder.model)
    attention_error, cosine = 0.0, 1.0
    for ids in inputs:
        with torch.no_grad():
            reference = [tensor.numpy() for tensor in wrapper(ids)]
        attention, hidden = run_onnx(session, ids)
        attention_error = max(attention_error, float(np.abs(attention - reference[0]).max()))
        ours, theirs = hidden[-1], reference[1][-1]  # (T, D) each
        cosines = (ours * theirs).sum(-1) / (
            np.linalg.norm(ours, axis=-1) * np.linalg.norm(theirs, axis=-1)
        )  # (T,)
        cosine = min(cosine, float(cosines.min()))
    return {"max_attention_error": attention_error, "min_last_layer_cosine": cosine}


# ---------------------------------------------------------------------------------------------
# 4. The files the page loads
# ---------------------------------------------------------------------------------------------


def _float32(values: np.ndarray) -> list:
    """Numbers as the shortest decimals that read back as the same float32 (JSON stays small)."""
    return [[float(str(number)) for number in row] for row in values.astype(np.float32)]


def anchor_data(encoder: PretrainedEncoder) -> dict:
    """The apple explorer's anchor words, computed as chapter 10 computes them: each word run
    alone (``[CLS] word [SEP]``) by the PyTorch model, its vector after every layer
    (``anchor_vectors``), and its point in the explorer's plane at the last layer."""
    groups = {"fruit": FRUIT_ANCHORS, "technology": TECHNOLOGY_ANCHORS}
    anchors = encoder.anchor_vectors([*FRUIT_ANCHORS, *TECHNOLOGY_ANCHORS])  # word -> (L + 1, D)
    points = anchor_points(anchors, groups)
    return {
        "groups": {group: list(words) for group, words in groups.items()},
        "vectors": {word: _float32(vectors.numpy()) for word, vectors in anchors.items()},
        # word -> L + 1 lists of D numbers: row 0 is the embedding layer
        "points": [
            {
                "word": point.word,
                "group": point.group,
                "x": round(point.point[0], 6),
                "y": round(point.point[1], 6),
            }
            for point in points
        ],
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def write_browser_files(
    directory: str | Path,
    encoder: PretrainedEncoder | None = None,
    fp32_path: str | Path | None = None,
) -> dict:
    """Write :data:`FILES` into ``directory`` (created if missing) and return the manifest.

    ``encoder`` defaults to :func:`load_pretrained`. The float32 graph is an intermediate
    step; ``fp32_path`` keeps it (the tests compare it with PyTorch). Running this twice gives
    the same bytes in every file.
    """
    encoder = encoder or load_pretrained()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        fp32 = Path(fp32_path) if fp32_path is not None else Path(scratch) / "encoder.onnx"
        export_onnx(encoder, fp32)
        shrink(fp32, directory / MODEL_FILE)
        fp32_bytes = fp32.stat().st_size
    shutil.copyfile(encoder.directory / VOCAB_FILE, directory / VOCAB_FILE)
    _write_json(directory / ANCHORS_FILE, anchor_data(encoder))

    inputs = measurement_inputs(encoder)
    measured = compare(onnx_session(directory / MODEL_FILE), encoder, inputs)
    config = encoder.config
    manifest = {
        "model": {
            "name": encoder.name,
            "layers": config.num_layers,
            "heads": config.num_heads,
            "d_model": config.d_model,
            "max_length": config.max_length,
            "vocab_size": config.vocab_size,
            "opset": OPSET,
            "input": {"ids": "int64 (1, T), 1 <= T <= max_length"},
            "outputs": {
                "attention": "float32 (layers, heads, T, T)",
                "hidden": "float32 (layers + 1, T, d_model); row 0: the embedding layer",
            },
        },
        "shrinking": {
            "scheme": "8-bit weights, float32 activations: every nn.Linear weight int8 with one "
            f"float32 scale per {BLOCK} inputs of an output column; the token embedding "
            "table int8 with one scale per row; the rest float32",
            "fp32_bytes": fp32_bytes,
        },
        "tolerance": {  # the shrunk graph against the PyTorch model, rounded up
            "max_attention_error": _round_up(measured["max_attention_error"]),
            "min_last_layer_cosine": _round_down(measured["min_last_layer_cosine"]),
            "measured_on": {
                "sentences": list(SENTENCES),
                "random_sentences": {
                    "seed": RANDOM_SEED,
                    "tokens": [length + 2 for length in RANDOM_LENGTHS],
                },
            },
        },
        "files": {
            name: {"bytes": (directory / name).stat().st_size, "sha256": _sha256(directory / name)}
            for name in FILES
            if name != MANIFEST_FILE
        },
    }
    _write_json(directory / MANIFEST_FILE, manifest)
    return manifest


def _round_up(value: float, digits: int = 4) -> float:
    """``value`` rounded up at ``digits`` decimals (a bound stays a bound)."""
    return float(np.ceil(value * 10**digits) / 10**digits)


def _round_down(value: float, digits: int = 4) -> float:
    return float(np.floor(value * 10**digits) / 10**digits)


# ---------------------------------------------------------------------------------------------
# 5. The Sphinx extension
# ---------------------------------------------------------------------------------------------

SITE_DIRECTORY = ("_static", "encoder")  # where the page finds the files: _static/encoder/
PAGE_SCRIPTS = ("typed.js", "wordpiece.js")  # from views/explorers/, copied beside the model
PLACEHOLDER = 'class="tt-typed"'  # a chapter's markdown asks for the box with this <div>


def _copy_scripts(app) -> None:
    """``builder-inited``: copy :data:`PAGE_SCRIPTS` into ``_static/encoder/`` before any page
    is written, so that Sphinx stamps the page's link with the file's checksum."""
    if app.builder.name != "html":
        return
    from transformer_tutorial.views import explorers

    directory = Path(app.outdir).joinpath(*SITE_DIRECTORY)
    directory.mkdir(parents=True, exist_ok=True)
    for name in PAGE_SCRIPTS:
        shutil.copyfile(Path(explorers.__file__).parent / name, directory / name)


def _add_typed_script(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    """``html-page-context``: a page whose body has a placeholder loads ``typed.js`` (which
    loads everything else only when the reader asks); no other page loads anything."""
    if PLACEHOLDER in context.get("body", ""):
        app.add_js_file("/".join([*SITE_DIRECTORY[1:], PAGE_SCRIPTS[0]]), loading_method="defer")


def _write_to_site(app, exception: Exception | None) -> None:
    """``build-finished``: after a successful HTML build, export into ``_static/encoder/``
    (about 9 s; ``make book`` always builds from scratch, so there is nothing to reuse)."""
    if exception is not None or app.builder.name != "html":
        return
    write_browser_files(Path(app.outdir).joinpath(*SITE_DIRECTORY))


def setup(app) -> dict:
    """Sphinx entry point (``sphinx.extra_extensions`` in ``_config.yml``)."""
    app.connect("builder-inited", _copy_scripts)
    app.connect("html-page-context", _add_typed_script)
    app.connect("build-finished", _write_to_site)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
