"""BERT and the families that share its module layout (RoBERTa, XLM-R, CamemBERT, ELECTRA, and the
pre-layer-norm RoBERTa and XLM-R XL, whose attention module still returns the residual sum)."""

from __future__ import annotations

from .base import ArchitectureAdapter, LayerPaths

_BERT_LAYOUT = LayerPaths(
    query="attention.self.query",
    key="attention.self.key",
    value="attention.self.value",
    attention_output="attention.output.dense",
    ffn_up="intermediate.dense",
    ffn_down="output.dense",
    attention="attention.self",
)


class BertAdapter(ArchitectureAdapter):
    model_types = ("bert",)
    family = "BERT"
    layout = _BERT_LAYOUT
    # the modules derive the head width from hidden_size / heads; hidden-size pruning writes it here
    head_size_key = "attention_head_size"


class RobertaAdapter(BertAdapter):
    """RoBERTa, XLM-RoBERTa and CamemBERT: BERT's layer layout, other embeddings and heads."""

    model_types = ("roberta", "xlm-roberta", "camembert")
    family = "RoBERTa"

    def position_offset(self, config) -> int:
        # create_position_ids_from_input_ids: positions count from padding_idx + 1, padding_idx = pad_token_id
        pad = getattr(config, "pad_token_id", None)
        return (pad if isinstance(pad, int) else 1) + 1


class ElectraAdapter(BertAdapter):
    """ELECTRA: BERT's layers; a projection from a smaller embedding size counts as embeddings."""

    model_types = ("electra",)
    family = "ELECTRA"
    dropout_attrs = ("hidden_dropout_prob", "classifier_dropout", "summary_last_dropout")
    embedding_paths = ("embeddings", "embeddings_project")
    embedding_size_key = "embedding_size"
    # built when embedding_size != hidden_size (ElectraModel.__init__)
    embedding_projection = "embeddings_project"


class PreLayerNormRobertaAdapter(RobertaAdapter):
    """RoBERTa-PreLayerNorm: BERT's projections, LayerNorm before each block, RoBERTa's positions."""

    model_types = ("roberta-prelayernorm",)
    family = "RoBERTa-PreLayerNorm"
    pre_norm = True


class XlmRobertaXlAdapter(RobertaAdapter):
    """XLM-RoBERTa-XL: BERT's projections, LayerNorm before each block, RoBERTa's positions."""

    model_types = ("xlm-roberta-xl",)
    family = "XLM-RoBERTa-XL"
    pre_norm = True
