"""The RoPE encoders with Llama-style names (``self_attn.{q,k,v,o}_proj``, ``layers``):
EuroBERT (grouped-query attention, SwiGLU, pre-norm RMSNorm), GTE and NomicBERT (gated FFN,
post-norm) and Jina embeddings v3 (XLM-R's FFN, post-norm)."""

from __future__ import annotations

from .base import ArchitectureAdapter, LayerPaths

_ATTENTION = dict(
    query="self_attn.q_proj",
    key="self_attn.k_proj",
    value="self_attn.v_proj",
    attention_output="self_attn.o_proj",
    attention="self_attn",
)
_GATED_FFN = dict(ffn_up="mlp.up_proj", ffn_gate="mlp.gate_proj", ffn_down="mlp.down_proj")


class _RotaryAdapter(ArchitectureAdapter):
    layers_path = "layers"
    head_size_key = "head_dim"
    rotary = True


class EuroBertAdapter(_RotaryAdapter):
    model_types = ("eurobert",)
    family = "EuroBERT"
    layout = LayerPaths(**_ATTENTION, **_GATED_FFN, attention_block="post_attention_layernorm",
                        attention_block_is_input=True)
    num_kv_heads_key = "num_key_value_heads"
    pre_norm = True
    embedding_paths = ("embed_tokens",)
    dropout_attrs = ()  # EuroBERT has no dropout on hidden states
    attention_dropout_attrs = ("attention_dropout",)


class GteAdapter(_RotaryAdapter):
    model_types = ("gte",)
    family = "GTE"
    layout = LayerPaths(**_ATTENTION, **_GATED_FFN, attention_block="post_attention_layernorm")


class NomicBertAdapter(GteAdapter):
    model_types = ("nomic_bert",)
    family = "NomicBERT"


class JinaEmbeddingsV3Adapter(_RotaryAdapter):
    model_types = ("jina_embeddings_v3",)
    family = "Jina embeddings v3"
    layout = LayerPaths(**_ATTENTION, ffn_up="mlp.fc1", ffn_down="mlp.fc2", attention_block="post_attention_layernorm")
