"""The same vector kernels on every x86-64 processor, so a notebook prints the same numbers.

PyTorch, oneDNN, MKL, OpenBLAS and NumPy each pick their vectorised kernels by processor: on
an AVX-512 machine they add in another order than on an AVX2 one, and the results differ in the
last bit. Most of the book never notices, since it prints rounded numbers. A training does: it
feeds every step's rounding into the next, and a run near instability ends elsewhere. Measured
on an AVX-512 machine against the committed outputs (made on an AVX2 one), chapter 8's
character model ended at a training loss of 0.292 instead of 0.332, and chapter 6's post-LN
stack at learning rate 0.03 at 2.05 instead of 1.97; chapters 3 and 4 differed in a printed
rounding error and in one attention weight of the real model.

Pinned to the AVX2 kernels, which every x86-64 processor since 2015 has, the AVX-512 machine
gives the AVX2 machine's bits, file for file. The book's notebook runner gives these variables to
every kernel it starts, and the test suite, nbval included, loads this module as a pytest
plugin (``-p transformer_tutorial.book.kernels`` in ``pyproject.toml``), so its kernels and its
own PyTorch inherit them. A variable already set in the environment wins: setting one is how a
test stands in for another processor.

A reader's own run needs none of this: it prints the same numbers to the digits the prose
quotes, except in the trainings named above.
"""

import os

__all__ = ["SAME_KERNELS", "pin_kernels", "pinned_environment"]

SAME_KERNELS = {
    "ATEN_CPU_CAPABILITY": "avx2",  # PyTorch's own vectorised operators (softmax, sums, GELU...)
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN, behind some of PyTorch's float32 layers
    "MKL_CBWR": "AVX2",  # MKL, PyTorch's matrix products
    "OPENBLAS_CORETYPE": "Haswell",  # OpenBLAS, NumPy's matrix products
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",  # NumPy's own loops (sin, exp...)
}


def pinned_environment() -> dict[str, str]:
    """This process's environment with :data:`SAME_KERNELS` added where not already set."""
    return {**SAME_KERNELS, **os.environ}


def pin_kernels() -> None:
    """Set :data:`SAME_KERNELS` in this process's environment (before its libraries load)."""
    os.environ.update(pinned_environment())


def pytest_configure(config) -> None:
    """As a pytest plugin: pin before any test module imports PyTorch or NumPy, and before
    nbval starts a kernel (kernels inherit the environment)."""
    pin_kernels()
