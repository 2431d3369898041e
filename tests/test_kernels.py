"""The pinned vector kernels reach the tests, nbval's kernels and the notebook runner's kernels."""

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from transformer_tutorial.book.kernels import SAME_KERNELS, pinned_environment
from transformer_tutorial.book.notebooks import execute_notebook

NAMES = sorted(SAME_KERNELS)
PROBE = f"""import json, os, torch
print(json.dumps({{"env": {{k: os.environ.get(k) for k in {NAMES!r}}},
                  "capability": torch.backends.cpu.get_cpu_capability()}}))"""


def _has_avx2() -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.is_file() and " avx2" in cpuinfo.read_text()


def test_the_plugin_pins_this_test_process():
    # pyproject.toml loads transformer_tutorial.book.kernels as a pytest plugin
    for name, value in SAME_KERNELS.items():
        assert os.environ[name] == value, name


@pytest.mark.skipif(not _has_avx2(), reason="the pin chooses AVX2 kernels; this CPU has none")
def test_pytorch_in_this_process_runs_its_avx2_kernels():
    assert torch.backends.cpu.get_cpu_capability() == "AVX2"


def test_a_variable_already_set_wins(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert pinned_environment()["ATEN_CPU_CAPABILITY"] == "default"
    assert pinned_environment()["OPENBLAS_CORETYPE"] == SAME_KERNELS["OPENBLAS_CORETYPE"]


@pytest.mark.skipif(not _has_avx2(), reason="the pin chooses AVX2 kernels; this CPU has none")
def test_the_notebook_runner_gives_its_kernels_the_pin(tmp_path, monkeypatch):
    for name in SAME_KERNELS:  # as if run from a shell that never loaded the plugin
        monkeypatch.delenv(name, raising=False)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE)])
    path = tmp_path / "probe.ipynb"
    nbformat.write(notebook, path)
    run = execute_notebook(path)
    seen = json.loads(run.notebook.cells[0].outputs[0]["text"])
    assert seen == {"env": SAME_KERNELS, "capability": "AVX2"}


def test_without_the_pin_a_fresh_process_sees_none_of_it():
    # the pin is not a side effect of importing the package: only the runner and the plugin set it
    env = {k: v for k, v in os.environ.items() if k not in SAME_KERNELS}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, transformer_tutorial.book.notebooks as n;"
            f" print([os.environ.get(k) for k in {NAMES!r}])",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == str([None] * len(SAME_KERNELS))
