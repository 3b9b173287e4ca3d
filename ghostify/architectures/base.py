"""The adapter interface: what ghostify knows about one model family, written as data.

Adapters are the only code that names Hugging Face submodules and config keys. Each family is a
set of class attributes (layer layout, config keys, dropout keys, how its layers are shared, what
its attention supports); the base class only reads them (config values, submodules by path). What
a compression method does with these facts lives with the method (sharing, pruning, references),
so this package imports nothing of ghostify but its errors.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class LayerPaths:
    """Submodule paths inside one encoder layer (relative to the layer module)."""

    query: str | None  # None when ``qkv`` fuses the three projections
    key: str | None
    value: str | None
    attention_output: str  # the projection O whose input is the concatenated heads
    ffn_up: str  # FFN1: hidden -> d_ff (gated FFNs: the branch multiplied by the gate)
    ffn_down: str  # FFN2: d_ff -> hidden
    attention: str  # the module that owns the head-count attributes
    # further projections whose *outputs* are laid out per head (DeBERTa's relative-position ones)
    extra_head_outputs: tuple[str, ...] = ()
    # the module whose output is the hidden state after the attention block (after its residual
    # and LayerNorm); a tuple output's first element is used
    attention_block: str = "attention"
    # pre-norm layers: the hidden state after the attention residual is the *input* of this module
    # (the FFN's norm), since no module outputs it
    attention_block_is_input: bool = False
    # one fused projection for Q, K and V (ModernBERT's ``Wqkv``): rows are all query heads, then
    # all key heads, then all value heads
    qkv: str | None = None
    # a gated FFN's separate gate projection (``gate_proj``): its rows pair with ``ffn_up``'s
    ffn_gate: str | None = None
    # ``ffn_up`` itself is gated: its 2·d_ff rows are [input half; gate half] (ModernBERT's ``Wi``)
    ffn_up_gated: bool = False

    @property
    def head_outputs(self) -> tuple[str, ...]:
        """The projections whose outputs are laid out per head (fused: the one ``qkv``)."""
        separate = (self.qkv,) if self.qkv else (self.query, self.key, self.value)
        return (*separate, *self.extra_head_outputs)

    @property
    def ffn_inputs(self) -> tuple[str, ...]:
        """The projections whose outputs are FFN neurons (gated: the up and the gate projection)."""
        return (self.ffn_up, self.ffn_gate) if self.ffn_gate else (self.ffn_up,)

    def group(self, name: str) -> tuple[str, ...]:
        """The paths of one per-layer ``export --keep-fp32`` group (``settings.MODULE_GROUPS``)."""
        return {"attention-output": (self.attention_output,), "ffn-up": self.ffn_inputs,
                "ffn-down": (self.ffn_down,)}[name]

    @property
    def fused(self) -> bool:
        """Whether a projection holds more than one kind of unit (fused Q/K/V, fused input/gate)."""
        return self.qkv is not None or self.ffn_up_gated


@dataclass(frozen=True)
class ConfigGroups:
    """Layers shared through the config (ALBERT): ``config.<count_key>`` group modules at ``path``
    (relative to ``model.base_model``), each running its ``config.<inner_count_key>`` layers listed
    under ``inner``. Step ``i`` of ``L`` runs group ``int(i / (L / G))``, so ``G`` must divide ``L``
    for the groups to be contiguous and equal."""

    path: str
    inner: str
    count_key: str
    inner_count_key: str


def group_of_step(step: int, steps: int, groups: int) -> int:
    """The group a :class:`ConfigGroups` family runs at ``step``, exactly as ALBERT's forward computes it."""
    return int(step / (steps / groups))


class ArchitectureAdapter:
    """Base class; subclasses set the class attributes (and ``paths`` where the layout depends on the config)."""

    model_types: tuple[str, ...] = ()
    #: the family's name in messages
    family: str = ""
    #: where the projections sit inside one layer
    layout: LayerPaths
    #: config keys of the geometry; ``head_size_key`` / ``embedding_size_key``: an explicit head
    #: width / word-embedding width where the family has one (else hidden / heads, hidden)
    num_heads_key: str = "num_attention_heads"
    hidden_size_key: str = "hidden_size"
    ffn_size_key: str = "intermediate_size"
    num_layers_key: str = "num_hidden_layers"
    #: grouped-query attention: the config key of the number of key/value heads (None: one per head)
    num_kv_heads_key: str | None = None
    #: the head width's config key: the family's own where its modules read it (DeBERTa-v2's
    #: ``attention_head_size``, the RoPE families' ``head_dim``), else the key that hidden-size pruning
    #: writes once hidden / heads no longer says it (BERT's modules derive it and ignore the key: the
    #: restore sets it on the attention modules, ``head_size_attrs``). None: the family has no such key
    #: (a plug-in adapter), and ``prune-hidden`` refuses it
    head_size_key: str | None = None
    embedding_size_key: str | None = None
    #: the layer modules relative to ``model.base_model``, one slot per step of the forward pass
    #: (unless ``config_groups`` says the config shares them)
    layers_path: str = "encoder.layer"
    config_groups: ConfigGroups | None = None
    #: modules relative to ``model.base_model`` that make up the embeddings (not encoder params)
    embedding_paths: tuple[str, ...] = ("embeddings",)
    #: attribute names on the attention module that hold the head count / total head width
    head_count_attrs: tuple[str, ...] = ("num_attention_heads",)
    head_width_attrs: tuple[str, ...] = ("all_head_size",)
    #: attribute names on the attention module that hold one head's width and its score scale
    #: (``head_size ** -0.5``), where its forward reads them (hidden-size pruning keeps each head's
    #: width while the hidden size shrinks, so a module built from the config gets them set back)
    head_size_attrs: tuple[str, ...] = ("attention_head_size", "head_dim")
    head_scaling_attrs: tuple[str, ...] = ("scaling",)
    #: further config keys that hold the hidden width (DeBERTa-v2's ``pooler_hidden_size``): hidden-size
    #: pruning sets them to the kept width where they equal the hidden size
    hidden_width_keys: tuple[str, ...] = ()
    #: the linear map, relative to ``model.base_model``, from embeddings narrower than the hidden size
    #: into the residual stream (ELECTRA's ``embeddings_project``, ALBERT's ``embedding_hidden_mapping_in``),
    #: and whether it has a bias; the family builds it only where the two widths differ (ALBERT: always)
    embedding_projection: str | None = None
    embedding_projection_bias: bool = True
    #: whether the forward runs that projection whenever the module exists (ELECTRA, ALBERT), rather than
    #: only while ``embedding_size != hidden_size`` (DeBERTa-v2: a hidden size cut to the embedding size
    #: would silently skip it)
    embedding_projection_if_present: bool = True
    #: modules, relative to ``model.base_model``, whose hidden-width output is not one row per example
    #: (DeBERTa-v2's norm of the relative-position embeddings): per-example channel gates leave them out
    shared_hidden_modules: tuple[str, ...] = ()
    #: the positional argument of the attention module's forward that carries a position bias with
    #: one column per head, computed once for all layers (MPNet); a pruned layer selects its heads' columns
    position_bias_arg: int | None = None
    #: whether attention runs through transformers' AttentionInterface (eager/SDPA/registered)
    uses_attention_interface: bool = True
    #: config attributes of the dropout on hidden states (embeddings, residual branches, task
    #: heads) and of the dropout on attention probabilities; read when the model is built
    dropout_attrs: tuple[str, ...] = ("hidden_dropout_prob", "classifier_dropout")
    attention_dropout_attrs: tuple[str, ...] = ("attention_probs_dropout_prob",)
    #: whether attention applies rotary position embeddings to queries and keys inside each layer
    rotary: bool = False
    #: whether each block normalises its input (pre-norm) rather than its output
    pre_norm: bool = False
    #: why the layers cannot be shared across depth (None: they can); ``share-layers`` refuses with it
    layers_not_interchangeable: str | None = None
    #: config keys holding one entry per layer (ModernBERT's ``layer_types``): ``drop-layers`` keeps the
    #: kept layers' entries, so that the config builds each kept layer as it was
    per_layer_config_keys: tuple[str, ...] = ()

    # ----- configuration -------------------------------------------------------------------
    def num_heads(self, config) -> int:
        return int(getattr(config, self.num_heads_key))

    def head_size(self, config) -> int:
        explicit = getattr(config, self.head_size_key, None) if self.head_size_key else None
        return int(explicit or self.hidden_size(config) // self.num_heads(config))

    def heads_per_unit(self, config) -> int:
        """Query heads per attention unit: the heads that share one key/value head (1 without GQA)."""
        if self.num_kv_heads_key is None:
            return 1
        kv = getattr(config, self.num_kv_heads_key, None) or self.num_heads(config)
        return self.num_heads(config) // int(kv)

    def num_units(self, config) -> int:
        """Attention units per dense layer: what importance scores and pruning count, and what
        ``record.heads`` lists. A unit is one head, or with GQA one key/value head with its query heads."""
        return self.num_heads(config) // self.heads_per_unit(config)

    def unit_noun(self, config) -> str:
        """What one attention unit is called in messages."""
        return "head" if self.heads_per_unit(config) == 1 else "key/value group"

    def unit_width(self, config) -> int:
        """Channels of one unit in the attention output projection's input (its query heads' outputs)."""
        return self.heads_per_unit(config) * self.head_size(config)

    def ffn_size(self, config) -> int:
        return int(getattr(config, self.ffn_size_key))

    def hidden_size(self, config) -> int:
        return int(getattr(config, self.hidden_size_key))

    def vocab_size(self, config) -> int:
        return int(config.vocab_size)

    def embedding_width(self, config) -> int:
        """Columns of the word-embedding matrix (ALBERT, ELECTRA: a smaller embedding size)."""
        explicit = getattr(config, self.embedding_size_key, None) if self.embedding_size_key else None
        return int(explicit or self.hidden_size(config))

    def max_positions(self, config) -> int:
        """Rows of the position-embedding table (``max_position_embeddings``; 512 when a config has none)."""
        value = getattr(config, "max_position_embeddings", None)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 512

    def position_offset(self, config) -> int:
        """Rows of the position table before a token's first position: 0 where position ids count
        from 0 (BERT-likes). RoBERTa-style families (``position_offset`` overridden) number positions
        from ``padding_idx + 1``. The RoPE families (ModernBERT, EuroBERT, GTE, NomicBERT, Jina v3)
        and DeBERTa-v2 without ``position_biased_input`` index no table by position at all: their
        ``max_position_embeddings`` is the context they were trained for, which is kept as their limit."""
        return 0

    def usable_positions(self, config) -> int:
        """The longest input (in tokens) the model reads: its position rows less the offset."""
        return self.max_positions(config) - self.position_offset(config)

    def num_layers(self, config) -> int:
        """Layer applications in one forward pass (the depth, shared layers counted each time)."""
        return int(getattr(config, self.num_layers_key))

    def paths(self, config) -> LayerPaths:
        """Where the projections sit inside one layer of this family."""
        return self.layout

    def hidden_pruning_refusal(self, config) -> str | None:
        """Why the residual stream's width cannot be cut in this family's model of ``config`` (a module
        of hidden width that no channel selection describes), or None."""
        if self.head_size_key is None:
            return f"the {self.family} adapter names no config key for the head width (head_size_key)"
        return None

    def first_layer_fixed(self, config) -> str | None:
        """Why the first layer must stay first (the config builds it unlike the others, or the
        encoder runs something after it alone), or None; ``drop-layers`` then always keeps it."""
        return None

    def set_dropout(self, config, dropout: float | None, attention_dropout: float | None) -> None:
        """Set the dropout probabilities on ``config`` before a model is built from it (None: keep)."""
        for attrs, value in ((self.dropout_attrs, dropout), (self.attention_dropout_attrs, attention_dropout)):
            if value is not None:
                for attr in attrs:
                    setattr(config, attr, float(value))

    # ----- module access ---------------------------------------------------------------------
    def step_groups(self, model: nn.Module) -> list[nn.Module]:
        """For a :class:`ConfigGroups` family: the group module run at each step of one forward pass."""
        groups, config = self.config_groups, model.config
        modules = model.base_model.get_submodule(groups.path)
        steps = self.num_layers(config)
        count = int(getattr(config, groups.count_key))
        return [modules[group_of_step(i, steps, count)] for i in range(steps)]

    def applied_layers(self, model: nn.Module) -> list[nn.Module]:
        """The encoder layer run at each step of one forward pass, in order: a layer shared by
        several steps (``share-layers``, ALBERT) appears once per step, as the same object."""
        if self.config_groups is not None:
            inner = self.config_groups.inner
            return [layer for group in self.step_groups(model) for layer in getattr(group, inner)]
        return list(model.base_model.get_submodule(self.layers_path))

    def layers(self, model: nn.Module) -> list[nn.Module]:
        """The distinct parameterised encoder layers, in order of first application."""
        return list({id(layer): layer for layer in self.applied_layers(model)}.values())

    def layer_applications(self, model: nn.Module) -> list[int]:
        """How often each layer of :meth:`layers` runs in one forward pass (1 unless shared)."""
        counts: dict[int, int] = {}
        for layer in self.applied_layers(model):
            counts[id(layer)] = counts.get(id(layer), 0) + 1
        return list(counts.values())

    def layer_order(self, model: nn.Module) -> list[int]:
        """For each step of one forward pass, the index in :meth:`layers` of the layer it runs."""
        index: dict[int, int] = {}
        return [index.setdefault(id(layer), len(index)) for layer in self.applied_layers(model)]

    def embedding_modules(self, model: nn.Module) -> list[nn.Module]:
        base = model.base_model
        return [base.get_submodule(p) for p in self.embedding_paths if _has_submodule(base, p)]

    def submodule(self, layer: nn.Module, path: str) -> nn.Module:
        return layer.get_submodule(path)

    def set_submodule(self, layer: nn.Module, path: str, module: nn.Module) -> None:
        parent_path, _, name = path.rpartition(".")
        parent = layer.get_submodule(parent_path) if parent_path else layer
        setattr(parent, name, module)

    def paths_for_layer(self, layer: nn.Module) -> LayerPaths:
        return self._paths

    def bind(self, config) -> "ArchitectureAdapter":
        """Resolve config-dependent paths once (DeBERTa's optional projections)."""
        self._paths = self.paths(config)
        return self


def _has_submodule(module: nn.Module, path: str) -> bool:
    try:
        module.get_submodule(path)
    except AttributeError:
        return False
    return True
