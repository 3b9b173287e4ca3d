"""Compressed models for runtimes without ghostify: transformers' ``from_pretrained`` (``hf``),
ONNX Runtime (``onnx``, optionally int8), sentence-transformers; see ``ghostify export``."""
