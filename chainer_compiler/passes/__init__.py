"""Graph passes over ONNX models, each in its own module."""
