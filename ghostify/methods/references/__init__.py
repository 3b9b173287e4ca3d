"""RefBERT (Wang et al., 2021): the student's first layer also attends to the teacher's
pre-computed representations of a similar training example, retrieved at inference without the
teacher. ``search`` finds neighbours, ``store`` holds the teacher's representations, ``module``
wires both into a model; the δ-shifted first-layer attention is a hook of :mod:`ghostify.attention`."""

from __future__ import annotations

from ...lazy import lazy_exports
from ..base import Method, lazy
from .describe import describe
from .settings import DEFAULT_DELTA, REFERENCES_NAME, ReferenceSettings, check_delta

METHOD = Method(
    name="references", tag="refbert", command="distill", when="references", noun="reference attention", settings=ReferenceSettings,
    restore=lazy("ghostify.methods.references.restore:restore"),
    validate=lazy("ghostify.methods.references.restore:check_entry"),
    save=lazy("ghostify.methods.references.apply:write_references"),
    export_refusal=lambda entry, format: (
        f"has RefBERT reference attention, which --format {format} cannot carry: its reference store "
        "(references.safetensors) is read by ghostify's loader, which neither a stock from_pretrained nor ONNX Runtime "
        "runs; export the model distilled without --references"),
    describe=describe,
    measure=lazy("ghostify.methods.references.apply:measure"),
)

# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "apply": ("reference_record", "write_references"),
        "families": ("check_reference_family",),
        "modules": ("ReferenceAttention", "find_references", "install_references"),
        "restore": ("restore_references",),
        "search": ("nearest", "ridge_fit"),
        "store": ("ReferenceStore", "build_store"),
    },
)

__all__ = [
    "DEFAULT_DELTA",
    "METHOD",
    "REFERENCES_NAME",
    "ReferenceAttention",
    "ReferenceSettings",
    "ReferenceStore",
    "build_store",
    "check_delta",
    "check_reference_family",
    "describe",
    "find_references",
    "install_references",
    "nearest",
    "reference_record",
    "restore_references",
    "ridge_fit",
    "write_references",
]
