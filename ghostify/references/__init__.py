"""RefBERT (Wang et al., 2021): the student's first layer also attends to the teacher's
pre-computed representations of a similar training example, retrieved at inference without the
teacher. ``search`` finds neighbours, ``store`` holds the teacher's representations, ``module``
wires both into a model; the δ-shifted first-layer attention is a hook of :mod:`ghostify.attention`."""

from .module import (REFERENCES_NAME, ReferenceAttention, find_references, install_references,
                     restore_references, write_references)
from .search import nearest, ridge_fit
from .store import ReferenceStore, build_store

__all__ = ["REFERENCES_NAME", "ReferenceAttention", "ReferenceStore", "build_store", "find_references",
           "install_references", "nearest", "restore_references", "ridge_fit", "write_references"]
