"""Architecture adapters, one per model family, looked up by ``config.model_type``: facts about
the family (layout, config keys, sharing, attention), read by the compression methods."""

from __future__ import annotations

from ..errors import UnsupportedModelError
from .albert import AlbertAdapter
from .base import ArchitectureAdapter, ConfigGroups, LayerPaths, group_of_step
from .bert import BertAdapter, ElectraAdapter, PreLayerNormRobertaAdapter, RobertaAdapter, XlmRobertaXlAdapter
from .deberta_v2 import DebertaV2Adapter
from .distilbert import DistilBertAdapter
from .modernbert import ModernBertAdapter
from .mpnet import MPNetAdapter
from .projections import Cut, attention_cuts, attention_units, ffn_cuts, ffn_units
from .rotary import EuroBertAdapter, GteAdapter, JinaEmbeddingsV3Adapter, NomicBertAdapter

_ADAPTERS: tuple[type[ArchitectureAdapter], ...] = (
    BertAdapter,
    RobertaAdapter,
    ElectraAdapter,
    DistilBertAdapter,
    AlbertAdapter,
    DebertaV2Adapter,
    MPNetAdapter,
    PreLayerNormRobertaAdapter,
    XlmRobertaXlAdapter,
    ModernBertAdapter,
    EuroBertAdapter,
    GteAdapter,
    NomicBertAdapter,
    JinaEmbeddingsV3Adapter,
)
_BY_TYPE = {model_type: cls for cls in _ADAPTERS for model_type in cls.model_types}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_BY_TYPE)


def get_adapter(config) -> ArchitectureAdapter:
    """The adapter for ``config.model_type``; a clear error for any other architecture."""
    model_type = getattr(config, "model_type", None)
    if model_type not in _BY_TYPE:
        raise UnsupportedModelError(
            f"unsupported architecture {model_type!r}: ghostify compresses encoders of type "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}; pick a model of one of these families"
        )
    return _BY_TYPE[model_type]().bind(config)


def usable_positions(config) -> int:
    """The longest input, in tokens, a model of ``config`` reads (see ``ArchitectureAdapter.position_offset``):
    the one limit for --seq-len, --max-length and the augmentation's masked LM."""
    return get_adapter(config).usable_positions(config)


__all__ = ["ArchitectureAdapter", "ConfigGroups", "Cut", "LayerPaths", "SUPPORTED_MODEL_TYPES", "attention_cuts", "attention_units",
           "ffn_cuts", "ffn_units", "get_adapter", "group_of_step", "usable_positions"]
