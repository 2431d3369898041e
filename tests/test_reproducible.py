"""Toy trainings give the same numbers on every processor: training in float64 from initial
weights drawn in float64 (model/draws.py, studies/reproducible.py).

Another processor is stood in for by other kernels on this one: PyTorch's portable ones
(``ATEN_CPU_CAPABILITY=default``) and MKL's SSE2 code path (``MKL_CBWR=COMPATIBLE``), which sum
and sample in other orders than the AVX2 or AVX-512 code chosen by default.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from transformer_tutorial.model import draws
from transformer_tutorial.studies import reversal
from transformer_tutorial.studies.reproducible import reproducible_training

OTHER_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
STEPS = 40

PROBE = f"""
import hashlib, json, torch
from transformer_tutorial.studies import reversal
config = reversal.TrainingConfig()
def digest(tensors):
    return hashlib.sha256(b"".join(t.numpy().tobytes() for t in tensors)).hexdigest()
float32 = torch.empty(4096).normal_(0, 1, generator=torch.Generator().manual_seed(0))
initial = reversal.build_model(config.model_config(), torch.Generator().manual_seed(config.seed))
run = reversal.train(stop_after={STEPS})
print(json.dumps({{
    "float32 draws": digest([float32]),
    "initial weights": digest(initial.state_dict().values()),
    "losses": run.log.losses,
    "weights": {{name: value.flatten().tolist() for name, value in run.model.state_dict().items()}},
}}))
"""


def _probe(environment: dict[str, str]) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def both():
    return _probe({}), _probe(OTHER_KERNELS)


def test_initial_weights_are_bit_for_bit_the_same_where_float32_draws_are_not(both):
    here, there = both
    if here["float32 draws"] == there["float32 draws"]:
        pytest.skip("the other kernels sample float32 the same way here: no other processor")
    assert here["initial weights"] == there["initial weights"]


def test_a_training_ends_in_the_same_place(both):
    here, there = both
    assert len(here["losses"]) == STEPS
    assert here["losses"] == pytest.approx(there["losses"], rel=1e-8)
    for name, mine in here["weights"].items():
        torch.testing.assert_close(
            torch.tensor(mine), torch.tensor(there["weights"][name]), rtol=1e-6, atol=1e-7
        )


def test_draws_are_float64_rounded_to_the_default_dtype():
    generator = torch.Generator().manual_seed(3)
    sample = draws.normal((1000,), 2.0, generator)
    again = torch.randn(1000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert sample.dtype == torch.float32 and torch.equal(sample, (again * 2.0).float())
    bounded = draws.uniform((1000,), 0.5, torch.Generator().manual_seed(4))
    assert bounded.dtype == torch.float32 and bounded.abs().max() <= 0.5
    with draws.float64_draws():
        assert torch.nn.Linear(2, 2).weight.dtype == torch.float64
    assert torch.get_default_dtype() == torch.float32


def test_reproducible_training_switches_and_restores_everything():
    model = torch.nn.Linear(3, 2)
    threads = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"):
        with reproducible_training(model):
            assert model.weight.dtype == torch.float64
            assert torch.get_default_dtype() == torch.float64
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside")
    assert model.weight.dtype == torch.float32
    assert torch.get_default_dtype() == torch.float32
    assert torch.get_num_threads() == threads


def test_shipped_reversal_model_is_float32():
    assert {p.dtype for p in reversal.load_trained_model().parameters()} == {torch.float32}
