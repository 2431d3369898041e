"""Every toy training in the book runs in float64 on one thread, so that it ends in the same place.

A training is hundreds of steps, and each step feeds the last one's rounding errors into the
next. Processors sum the products inside a matrix multiplication in different orders (AVX2,
AVX-512 and ARM kernels split the sums differently), so float32 weights that start out equal
differ in their last bit after one step, and after a few hundred steps the difference reaches
the digits the book prints: chapter 9's reversal model, trained on the same data from the same
seed in float32, ended with a final loss of 0.0116 with this machine's AVX2 kernels and 0.0225
with PyTorch's portable ones and MKL's SSE2 path.

In float64 the same rounding errors start about 5e8 times smaller. Measured on that training,
with initial weights drawn in float64 too (:mod:`transformer_tutorial.model.draws`): the two
kinds of kernels end with losses 6e-10 apart and float32 weights at most 1.5e-8 apart, far
below anything printed. A run near instability still amplifies even these differences (chapter
8's character model ended at 0.292 instead of 0.332 on AVX-512 kernels), which is why the
notebooks and tests also run the same AVX2 kernels on every x86 machine
(:mod:`transformer_tutorial.book.kernels`). The trained model is handed back in float32, like
every other model in the book. One thread keeps every sum in the same order on a given machine
(and for matrices this small, one thread is also the fastest).
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["reproducible_training"]


@contextmanager
def reproducible_training(*models: nn.Module) -> Iterator[None]:
    """Inside the block: ``models`` in float64, new tensors float64 by default, one thread.

    On leaving (normally or by an exception) the models are float32 again and the caller's
    default dtype and thread count are restored. The models' initial weights are made before
    the block (drawn in float64, stored in float32), so a model trained here starts from the
    same weights as an untrained twin built the same way outside it.
    """
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    for model in models:
        model.double()
    try:
        yield
    finally:
        for model in models:
            model.float()
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)
