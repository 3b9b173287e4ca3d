"""The scores file of ``ghostify importance`` (``importance.safetensors``): per distinct layer, a score for every
head and FFN neuron, one per layer and one per residual channel, by each criterion (:mod:`ghostify.methods.criteria`),
and what ranks by them (``ranked_by``, ``hidden_ranked_by``).

It lives below the methods that read it (``prune``, ``drop-layers``, ``prune-hidden``): none of them imports
another for it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import safetensors.torch  # save_file looked up per call: a full disk is simulated by patching it
import torch
from safetensors import SafetensorError, safe_open

from ..errors import CheckpointError, GhostifyError
from .criteria import LEGACY, LOSS_GRADIENT
from .criteria import criteria as registered
from .criteria import get as get_criterion

SCORES_NAME = "importance.safetensors"


@dataclass
class GateScores:
    """One criterion's scores of every gate: per distinct layer, each head and FFN neuron; each layer (None: not
    scored); each residual channel (None: not scored)."""

    heads: list[torch.Tensor]
    ffn: list[torch.Tensor]
    layers: torch.Tensor | None = None
    hidden: torch.Tensor | None = None

    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        out = {f"{prefix}heads.{i}": t for i, t in enumerate(self.heads)}
        out |= {f"{prefix}ffn.{i}": t for i, t in enumerate(self.ffn)}
        if self.layers is not None:
            out[f"{prefix}layers"] = self.layers
        if self.hidden is not None:
            out[f"{prefix}hidden"] = self.hidden
        return out


@dataclass
class FisherScores:
    """The Fisher information of the gates, per distinct layer: ``E[(dL/dg)²]`` of every head, neuron and
    layer gate, and a factor of the layer's block among its heads and among its neurons
    (``factor.T @ factor / samples`` is ``E[∇g ∇gᵀ]`` over that layer's units)."""

    heads: list[torch.Tensor]
    ffn: list[torch.Tensor]
    layers: torch.Tensor
    head_factors: list[torch.Tensor]
    ffn_factors: list[torch.Tensor]
    samples: int
    #: E[(dL/dg)²] of a gate per residual channel shared by every layer (None: not scored, see ImportanceScores.hidden)
    hidden: torch.Tensor | None = None

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {f"fisher.heads.{i}": t for i, t in enumerate(self.heads)}
        out |= {f"fisher.ffn.{i}": t for i, t in enumerate(self.ffn)}
        out |= {f"fisher.factor.heads.{i}": t for i, t in enumerate(self.head_factors)}
        out |= {f"fisher.factor.ffn.{i}": t for i, t in enumerate(self.ffn_factors)}
        out["fisher.layers"] = self.layers
        if self.hidden is not None:
            out["fisher.hidden"] = self.hidden
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], layers: int, samples: Any, where: Path) -> FisherScores | None:
        """The Fisher scores in a scores file's ``tensors`` (None in a file without them: weight magnitude, or
        written by an older ghostify), each shape checked against the first-order scores beside them."""
        if "fisher.layers" not in tensors:
            return None
        try:
            fisher = cls(heads=[tensors[f"fisher.heads.{i}"] for i in range(layers)],
                         ffn=[tensors[f"fisher.ffn.{i}"] for i in range(layers)], layers=tensors["fisher.layers"],
                         head_factors=[tensors[f"fisher.factor.heads.{i}"] for i in range(layers)],
                         ffn_factors=[tensors[f"fisher.factor.ffn.{i}"] for i in range(layers)], samples=int(samples),
                         hidden=tensors.get("fisher.hidden"))
        except KeyError as exc:
            raise CheckpointError(f"corrupt importance file {where}: missing {exc}; re-run `ghostify importance`") from None
        except (TypeError, ValueError):
            raise CheckpointError(f"corrupt importance file {where}: its Fisher sample count {samples!r} is not a "
                                  "number; re-run `ghostify importance`") from None
        for i in range(layers):
            for kind, diagonal, factor, first in (("heads", fisher.heads[i], fisher.head_factors[i], tensors[f"heads.{i}"]),
                                                  ("ffn", fisher.ffn[i], fisher.ffn_factors[i], tensors[f"ffn.{i}"])):
                units = first.numel()
                if diagonal.numel() != units or factor.dim() != 2 or factor.shape[1] != units:
                    raise CheckpointError(f"corrupt importance file {where}: the Fisher scores of layer {i}'s {kind} "
                                          f"do not match its {units} units; re-run `ghostify importance`")
        hidden = tensors.get("hidden")
        if fisher.hidden is not None and (hidden is None or fisher.hidden.numel() != hidden.numel()):
            raise CheckpointError(f"corrupt importance file {where}: its Fisher channel scores do not match its "
                                  "first-order ones; re-run `ghostify importance`")
        if fisher.layers.numel() != layers or fisher.samples < 1:
            raise CheckpointError(f"corrupt importance file {where}: Fisher scores of {fisher.layers.numel()} layers "
                                  f"(of {layers}) from {fisher.samples} examples; re-run `ghostify importance`")
        return fisher


@dataclass
class ImportanceScores:
    """Per distinct layer: one score per head and per FFN neuron, as the model is now, by each criterion the file
    holds (:mod:`ghostify.methods.criteria` says where each one's are)."""

    #: the first-order scores E|dL/dg| (``loss-gradient``), or weight magnitude (``metadata["criterion"]``)
    heads: list[torch.Tensor]
    ffn: list[torch.Tensor]
    metadata: dict[str, Any] = field(default_factory=dict)
    #: one score per distinct layer (a gate on its whole update), for ``drop-layers``; None in
    #: scores without them (weight magnitude, files of an older ghostify)
    layers: torch.Tensor | None = None
    #: the Fisher information of the same gates (None in scores without it: weight magnitude, older files)
    fisher: FisherScores | None = None
    #: one score per residual channel (E|dL/dg| of a gate per channel shared by every layer), for ``prune-hidden``;
    #: and Minitron's activation score of each channel (mean |x| at every norm's output, summed over the norms).
    #: None where the family's hidden size cannot be cut, or in files of an older ghostify
    hidden: torch.Tensor | None = None
    hidden_activation: torch.Tensor | None = None
    #: the scores of every other registered criterion, by its name (saved as ``NAME.heads.0``, ...)
    more: dict[str, GateScores] = field(default_factory=dict)

    @property
    def criterion(self) -> str:
        """What :attr:`heads`, :attr:`ffn` and :attr:`layers` are."""
        return str(self.metadata.get("criterion", LOSS_GRADIENT))

    def criteria(self) -> tuple[str, ...]:
        """The criteria these scores can rank heads and neurons by: their own first, then the others in the
        registry's order."""
        present = [c.name for c in registered() if c.name != self.criterion and c.units_in(self) is not None]
        return (self.criterion, *present)

    def ranked_by(self, criterion: str) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor | None, str]:
        """The head, neuron and layer scores of ``criterion`` and the criterion they are: scores without that
        criterion's give their own (the caller says so)."""
        found = get_criterion(criterion)
        units = found.units_in(self) if found is not None else None
        if units is not None:
            return (*units, criterion)
        return self.heads, self.ffn, self.layers, self.criterion

    def hidden_criteria(self) -> tuple[str, ...]:
        """The criteria the channel scores can rank by (none without channel scores), in the registry's order."""
        return tuple(c.name for c in registered() if c.channels_in(self) is not None)

    def hidden_ranked_by(self, criterion: str) -> tuple[torch.Tensor | None, str]:
        """The channel scores of ``criterion`` and the criterion they are: scores without that one give the first of
        theirs (the caller says so); None without any."""
        found = get_criterion(criterion)
        values = found.channels_in(self) if found is not None else None
        if values is not None:
            return values, criterion
        present = self.hidden_criteria()
        return (get_criterion(present[0]).channels_in(self), present[0]) if present else (None, criterion)

    def check_matches(self, record: Any, source: str) -> None:
        """Refuse scores of another model than ``record``'s as it is now (other layers, heads or FFN sizes)."""
        heads = [t.numel() for t in self.heads]
        ffn = [t.numel() for t in self.ffn]
        if len(heads) != len(record.heads):  # the layers changed since (drop-layers, share-layers)
            raise GhostifyError(
                f"importance scores in {source} are for a model of {len(heads)} layers, but the model has "
                f"{len(record.heads)}; re-run `ghostify importance` on this model"
            )
        if heads != record.heads_per_layer or ffn != record.ffn:
            raise GhostifyError(
                f"importance scores in {source} are for {heads} heads / {ffn} neurons per layer, but the model has "
                f"{record.heads_per_layer} / {record.ffn}; re-run `ghostify importance` on this model"
            )

    def save(self, path: str | Path) -> None:
        tensors = GateScores(self.heads, self.ffn, self.layers, self.hidden).tensors("")
        if self.hidden_activation is not None:
            tensors["activation.hidden"] = self.hidden_activation
        for name, scores in self.more.items():
            tensors.update(scores.tensors(f"{name}."))
        metadata = dict(self.metadata)
        if self.fisher is not None:
            tensors.update(self.fisher.tensors())
            metadata["fisher_samples"] = self.fisher.samples
        metadata["criteria"] = list(self.criteria())
        if self.hidden_criteria():
            metadata["hidden_criteria"] = list(self.hidden_criteria())
        tensors = {k: t.float().contiguous() for k, t in tensors.items()}
        safetensors.torch.save_file(tensors, str(path), metadata={"ghostify": json.dumps(metadata)})

    @classmethod
    def load(cls, path: str | Path) -> "ImportanceScores":
        path = Path(path)
        if path.is_dir():
            path = path / SCORES_NAME
        if not path.is_file():
            raise CheckpointError(f"no importance scores at {path}; run `ghostify importance` first")
        try:
            with safe_open(str(path), framework="pt") as f:
                keys = list(f.keys())
                tensors = {k: f.get_tensor(k) for k in keys}
                metadata = json.loads((f.metadata() or {}).get("ghostify", "{}"))
        except (SafetensorError, OSError, ValueError) as exc:
            raise CheckpointError(f"corrupt importance file {path}: {exc}; re-run `ghostify importance`") from exc
        if not isinstance(metadata, dict):
            raise CheckpointError(f"corrupt importance file {path}: its metadata is not a mapping; re-run "
                                  "`ghostify importance`")
        for key in keys:  # every score, whichever path reads which of them
            check_scores(tensors[key], f"the scores {key} in {path}", signed=key.startswith("fisher.factor."))
        n = sum(1 for k in keys if k.startswith("heads."))
        base = _gate_scores(tensors, "", n, path)
        fisher = FisherScores.from_tensors(tensors, n, metadata.pop("fisher_samples", 0), path)
        metadata.pop("criteria", None)  # derived from what the file holds
        metadata.pop("hidden_criteria", None)
        activation = tensors.get("activation.hidden")
        if activation is not None and base.hidden is not None and activation.numel() != base.hidden.numel():
            raise CheckpointError(f"corrupt importance file {path}: its activation channel scores do not match its "
                                  "gradient ones; re-run `ghostify importance`")
        named = {m.group(1) for m in (re.match(r"(.+)\.heads\.0$", k) for k in keys) if m}
        more = {name: _gate_scores(tensors, f"{name}.", n, path) for name in sorted(named)
                if name not in LEGACY and get_criterion(name) is not None}
        return cls(heads=base.heads, ffn=base.ffn, metadata=metadata, layers=base.layers, fisher=fisher,
                   hidden=base.hidden, hidden_activation=activation, more=more)


def _gate_scores(tensors: dict[str, torch.Tensor], prefix: str, layers: int, where: Path) -> GateScores:
    """The scores under ``prefix`` of a scores file's ``tensors``, for ``layers`` distinct layers."""
    try:
        heads = [tensors[f"{prefix}heads.{i}"] for i in range(layers)]
        ffn = [tensors[f"{prefix}ffn.{i}"] for i in range(layers)]
    except KeyError as exc:
        raise CheckpointError(f"corrupt importance file {where}: missing {exc}; re-run `ghostify importance`") from exc
    return GateScores(heads, ffn, tensors.get(f"{prefix}layers"), tensors.get(f"{prefix}hidden"))


def check_scores(values: torch.Tensor | list[torch.Tensor], what: str, *, signed: bool = False) -> None:
    """Refuse scores that are NaN, infinite or (unless ``signed``: a Fisher block's factor, made of gradients)
    negative, in one line naming the first such value (``what``: "the layer scores"; ``{layer}`` in it is the
    index of the tensor in ``values``). Every reader of a scores file calls it (:meth:`ImportanceScores.load`), and
    the allocations on the scores they are given."""
    for index, tensor in enumerate(values if isinstance(values, list) else [values]):
        tensor = torch.as_tensor(tensor).detach()
        bad = ~torch.isfinite(tensor) if signed else ~torch.isfinite(tensor) | (tensor < 0)
        if bool(bad.any()):
            where = what.format(layer=index)
            position = tuple(int(i) for i in torch.nonzero(bad)[0])
            value = float(tensor[position]) if position else float(tensor)
            at = f" at {list(position)}" if position else ""
            kinds = "NaN or infinite" if signed else "negative, NaN or infinite"
            raise GhostifyError(f"{where} hold {kinds} values ({value:g}{at}); the scores are damaged: re-run "
                                "`ghostify importance`")


__all__ = ["FisherScores", "GateScores", "ImportanceScores", "SCORES_NAME", "check_scores"]
