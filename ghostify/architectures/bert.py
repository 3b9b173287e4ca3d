"""BERT and the families that share its module layout (RoBERTa, XLM-R, CamemBERT, ELECTRA)."""

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

    def paths(self, config) -> LayerPaths:
        return _BERT_LAYOUT


class RobertaAdapter(BertAdapter):
    """RoBERTa, XLM-RoBERTa and CamemBERT: BERT's layer layout, other embeddings and heads."""

    model_types = ("roberta", "xlm-roberta", "camembert")


class ElectraAdapter(BertAdapter):
    """ELECTRA: BERT's layers; a projection from a smaller embedding size counts as embeddings."""

    model_types = ("electra",)
    dropout_attrs = ("hidden_dropout_prob", "classifier_dropout", "summary_last_dropout")
    embedding_paths = ("embeddings", "embeddings_project")

    def embedding_width(self, config) -> int:
        return int(config.embedding_size or config.hidden_size)
