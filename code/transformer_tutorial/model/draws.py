"""Initial weights that are the same on every processor.

PyTorch draws float32 random numbers with code vectorised for the processor it runs on, and the
vectorised formulas round differently: from the same seed, ``uniform_`` and ``normal_`` give
float32 weights that differ in the last bit between, say, AVX2 and AVX-512 machines (measured
here by switching PyTorch's kernels: 1.5e-8 in ``linear``'s weights, 2.4e-7 in an embedding
table). Inference never notices; a training does, because it amplifies any difference step
after step (see :mod:`transformer_tutorial.studies.reproducible`). Drawn in float64, the same
numbers differ by about 1e-16, and rounding them to float32 makes them equal again. So every
initial weight in the book is drawn in float64, then stored in the default dtype (float32).
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["float64_draws", "normal", "uniform"]


def uniform(shape: tuple[int, ...], bound: float, generator: torch.Generator | None = None):
    """Weights ~ U(-bound, bound) of ``shape``, drawn in float64, in the default dtype."""
    draws = torch.empty(shape, dtype=torch.float64).uniform_(-bound, bound, generator=generator)
    return draws.to(torch.get_default_dtype())


def normal(shape: tuple[int, ...], std: float = 1.0, generator: torch.Generator | None = None):
    """Weights ~ N(0, std^2) of ``shape``, drawn in float64, in the default dtype."""
    draws = torch.randn(shape, generator=generator, dtype=torch.float64) * std
    return draws.to(torch.get_default_dtype())


@contextmanager
def float64_draws() -> Iterator[None]:
    """Inside the block, PyTorch's own initialisers (``nn.Linear``, ``nn.LSTM``, ...) draw in
    float64; call ``.float()`` on what was built there to store it in float32."""
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)
