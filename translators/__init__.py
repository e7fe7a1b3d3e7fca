"""Translators from Chainer models to ONNX."""
