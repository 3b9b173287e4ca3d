"""ModernBERT (also the architecture of ettin and mmBERT checkpoints): one fused ``Wqkv``
projection, a GeGLU FFN whose ``Wi`` holds the input and the gate halves, no biases by default,
pre-norm layers (layer 0 without an attention norm), RoPE, and layers that alternate between
sliding-window and global attention (a per-layer fact of the module, kept by every method)."""

from __future__ import annotations

from .base import ArchitectureAdapter, LayerPaths


class ModernBertAdapter(ArchitectureAdapter):
    model_types = ("modernbert",)
    family = "ModernBERT"
    layout = LayerPaths(
        query=None,
        key=None,
        value=None,
        qkv="attn.Wqkv",
        attention_output="attn.Wo",
        ffn_up="mlp.Wi",
        ffn_up_gated=True,
        ffn_down="mlp.Wo",
        attention="attn",
        attention_block="mlp_norm",
        attention_block_is_input=True,
    )
    layers_path = "layers"
    # ModernBertAttention derives the head width from hidden_size / heads, but its rotary embedding reads
    # config.head_dim first: hidden-size pruning writes it here
    head_size_key = "head_dim"
    dropout_attrs = ("embedding_dropout", "mlp_dropout", "classifier_dropout")
    attention_dropout_attrs = ("attention_dropout",)
    rotary = True
    pre_norm = True
    layers_not_interchangeable = (
        "ModernBERT layers are not interchangeable: layer 0 has no attention norm and the layers alternate "
        "sliding-window and global attention"
    )
    # the config's attention pattern (sliding or global) per layer
    per_layer_config_keys = ("layer_types",)

    def first_layer_fixed(self, config) -> str | None:
        return "ModernBERT builds its first layer without an attention norm"
