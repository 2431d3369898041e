"""The Transformer, built from first principles: the tested code behind every chapter of the book.

One module per concept, one chapter per module. A chapter notebook teaches; the module computes.

Shape notation
--------------
Every line that reshapes an array carries a comment such as ``# (B, T, D) -> (B, H, T, K)``.
The letters always mean the same thing:

=====  ==============================================================
``B``  batch size: how many sequences are processed together
``T``  query length: how many positions ask questions
``S``  key length: how many positions can be looked at (``S == T`` in self-attention)
``D``  ``d_model``: the width of every token vector between sub-layers
``H``  number of attention heads
``K``  ``d_k``: the width of one head's queries and keys (``D // H``)
``V``  ``d_v``: the width of one head's values
``F``  ``d_ff``: the hidden width of the feed-forward network (``4 D`` by default)
``L``  number of layers in a stack (the paper writes ``N``)
``P``  rows of a position table: the most positions it encodes (``max_len``)
=====  ==============================================================

The vocabulary's size is written ``|V|`` (``V`` alone is ``d_v``).
"""

from transformer_tutorial.book.seed import set_seed

__all__ = ["set_seed"]
