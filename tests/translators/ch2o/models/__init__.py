"""Whole models for the ch2o translator's tests, after the original
chainer-compiler's ch2o "model" cases: the image classifiers with their
losses (``cnn``), the recurrent models (``rnn``) and the blocks of EspNet's
attention-based speech recogniser (``espnet``).

They keep each original's structure and the Python it is written in
(loops over time steps, lists that grow, ``None`` states, helper
functions), at sizes small enough for the whole test file to run in about
a minute.  ch2o translates ``forward``'s source, so the helper functions a
model calls live in the same module as the model.
"""
