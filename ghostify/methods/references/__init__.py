"""RefBERT (Wang et al., 2021): the student's first layer also attends to the teacher's
pre-computed representations of a similar training example, retrieved at inference without the
teacher. ``search`` finds neighbours, ``store`` holds the teacher's representations, ``module``
wires both into a model; the δ-shifted first-layer attention is a hook of :mod:`ghostify.attention`."""

from __future__ import annotations

from ..base import Method
from . import restore
from .apply import install_references, reference_record, write_references
from .describe import describe
from .families import check_reference_family
from .modules import ReferenceAttention, find_references
from .restore import restore_references
from .search import nearest, ridge_fit
from .settings import REFERENCES_NAME, check_delta
from .store import ReferenceStore, build_store

METHOD = Method(
    name="references", record_key="references", command="distill", when="references", noun="reference attention",
    restore=restore.restore,
    describe=describe,
)

__all__ = [
    "check_reference_family",
    "METHOD",
    "REFERENCES_NAME",
    "ReferenceAttention",
    "ReferenceStore",
    "build_store",
    "check_delta",
    "describe",
    "find_references",
    "install_references",
    "nearest",
    "reference_record",
    "restore_references",
    "ridge_fit",
    "write_references",
]
