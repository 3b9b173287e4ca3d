"""The ghost settings: one validated dataclass, saved in the checkpoint record.

Every check that needs only the settings lives in :meth:`GhostSettings.__post_init__`, so the CLI,
the Python API and a checkpoint's record fail the same way, with one line that names the setting,
its value and the fix. Checks that need the model (the family, the pruned heads) are in
:func:`ghostify.methods.ghost.attach_ghosts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from ...errors import GhostifyError
from ..base import setting

#: where a ghost module can sit, in the order they run inside a layer
POSITIONS: tuple[str, ...] = ("qk", "v", "o", "ffn1", "ffn2")


POSITION_HELP = {
    "qk": "a Conv2D on each head's attention scores (after QK^T, before softmax)",
    "v": "after the value projection: N_H - M ghost value heads generated from the M kept ones",
    "o": "after the attention output projection (the paper's 'after O')",
    "ffn1": "after the FFN up projection, before its activation",
    "ffn2": "after the FFN down projection (the paper's 'after FFN2')",
}


DEFAULT_POSITIONS: tuple[str, ...] = ("o", "ffn2")


#: the paper's Table 5 convolutions; every one slides over the sequence except conv1d-feature
CONVS: tuple[str, ...] = ("dwconv", "conv1d-seq", "conv1d-feature", "conv2d")


CONV_HELP = {
    "dwconv": "depthwise 1-D over the sequence: one k-tap kernel per feature channel (d·k weights)",
    "conv1d-seq": "regular 1-D over the sequence, mixing all channels (d·d·k weights)",
    "conv1d-feature": "1-D over the feature axis of each token, one k-tap kernel (k weights)",
    "conv2d": "2-D over the (sequence x feature) plane, one k x k kernel (k·k weights)",
}


#: positions whose output is a sum over heads (or FFN folds), where --per-head has a meaning
PER_HEAD_POSITIONS: tuple[str, ...] = ("qk", "v", "o", "ffn2")


#: positions computed inside the attention function (need transformers' AttentionInterface)
ATTENTION_POSITIONS: tuple[str, ...] = ("qk", "v")


#: how the kernels start; "uniform" is the paper's (zero logits: the mean over the window)
INITS: tuple[str, ...] = ("uniform", "center", "zero-scale")


INIT_HELP = {
    "uniform": "the paper's: each kernel the mean over its window, so a module starts as y + ReLU(mean of y)",
    "center": "not in the paper: each kernel peaked on the centre token (weight 0.9), so a module starts close to "
    "y + ReLU(y)",
    "zero-scale": "not in the paper: uniform kernels times a learnable per-channel output scale that starts at zero, "
    "so a module starts as y (its outputs are unchanged) and learns how much ghost to add",
}


#: the most ghost features a module may sum: each one adds a full set of kernels (the paper uses 1)
MAX_FEATURES = 64


@dataclass(frozen=True)
class GhostSettings:
    """What ghost modules to attach; the defaults are the paper's.

    Example:
        >>> GhostSettings().describe()                          # the paper's
        'dwconv k=3 softmax relu F=1 shared at o,ffn2'
        >>> GhostSettings(kernel_size=5, positions="ffn1,o").positions
        ('o', 'ffn1')
    """

    kernel_size: int = setting(3, help="Kernel width in tokens (odd: 1, 3, 5, 9, 17, ...).")
    softmax: bool = setting(True, flag="--softmax/--no-softmax", help="Softmax-normalise each kernel (the paper's default).")
    relu: bool = setting(True, flag="--relu/--no-relu", help="ReLU on each ghost feature (the paper's default).")
    features: int = setting(1, help="Ghost features F per module, summed.")
    per_head: bool = setting(False, help="A kernel per head (per FFN fold) on its own contribution, instead of one "
                             "shared kernel on their sum.")
    conv: str = setting("dwconv", help="; ".join(f"{c}: {h}" for c, h in CONV_HELP.items()) + ".")
    #: given as "o,ffn2" (CLI, recipes) or a sequence; held as a tuple in the layer order of POSITIONS
    positions: tuple[str, ...] = setting(
        ",".join(DEFAULT_POSITIONS), type=str,
        help=f"Comma-separated, among {', '.join(POSITIONS)}: after the attention output projection (o), the FFN "
        "down (ffn2) and up (ffn1) projections, the value projection (v: regenerates the N_H - M pruned heads), on the "
        "attention scores (qk: a Conv2D).")
    init: str = setting("uniform", help="How the kernels start. " + "; ".join(f"{i}: {h}" for i, h in INIT_HELP.items()) + ".")

    def __post_init__(self) -> None:
        object.__setattr__(self, "positions", _parse_positions(self.positions))
        k, f = self.kernel_size, self.features
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise GhostifyError(f"--kernel-size {k!r} is not a positive integer; use an odd size such as 1, 3, 5, 9 or 17")
        if k % 2 == 0:
            raise GhostifyError(
                f"--kernel-size {k} is even; the kernel is centred on each token, so use an odd size (1, 3, 5, 9, 17, ...)"
            )
        if isinstance(f, bool) or not isinstance(f, int) or f < 1:
            raise GhostifyError(f"--features {f!r} is not a positive integer; use 1 (the paper's default) or more")
        if f > MAX_FEATURES:
            raise GhostifyError(
                f"--features {f} exceeds {MAX_FEATURES}: every feature adds a full set of kernels to each module; "
                f"use 1 (the paper's default) to {MAX_FEATURES}"
            )
        if self.init not in INITS:
            raise GhostifyError(f"unknown --init {self.init!r}; choose one of {', '.join(INITS)} (the paper: uniform)")
        if self.conv not in CONVS:
            raise GhostifyError(f"unknown --conv {self.conv!r}; choose one of {', '.join(CONVS)}")
        for name in ("softmax", "relu", "per_head"):
            if not isinstance(getattr(self, name), bool):
                raise GhostifyError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.per_head and "ffn1" in self.positions:
            raise GhostifyError(
                "--per-head does not apply to position ffn1 (its output is not a sum over heads or folds); "
                "drop --per-head or ffn1 from --positions"
            )
        if "qk" in self.positions and self.conv in ("conv1d-seq", "conv1d-feature"):
            raise GhostifyError(
                f"--conv {self.conv} cannot act on attention maps (position qk always uses a k x k Conv2D); "
                "use --conv dwconv or conv2d, or drop qk from --positions"
            )
        if f > 1 and self.softmax and k == 1 and self.conv != "conv1d-seq":
            raise GhostifyError(
                f"--features {f} with a 1-tap softmax kernel makes {f} identical features (a softmax over one weight "
                "is always 1); use --no-softmax or a --kernel-size above 1"
            )

    def check_model(self, *, max_positions: int) -> None:
        """What needs the model: a kernel wider than the longest sequence the model embeds has
        taps that never see a token, only weights and FLOPs."""
        if self.kernel_size > max_positions:
            largest = max_positions if max_positions % 2 else max_positions - 1
            raise GhostifyError(
                f"--kernel-size {self.kernel_size} exceeds the model's {max_positions} positions (its longest "
                f"sequence): the extra taps would only add weights; use an odd size up to {largest} (the paper: 3)"
            )

    # ----- (de)serialisation -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["positions"] = list(self.positions)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GhostSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise GhostifyError(f"unknown ghost setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**dict(data))

    def describe(self) -> str:
        """One line for tables and logs, e.g. ``dwconv k=3 softmax relu F=1 shared at o,ffn2``."""
        parts = [self.conv, f"k={self.kernel_size}", "softmax" if self.softmax else "no-softmax"]
        parts += ["relu" if self.relu else "no-relu", f"F={self.features}", "per-head" if self.per_head else "shared"]
        if self.init != "uniform":
            parts.append(f"init={self.init}")
        return " ".join(parts) + " at " + ",".join(self.positions)


def _parse_positions(value: str | Iterable[str]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(p).strip().lower() for p in items if str(p).strip()]
    if not names:
        raise GhostifyError(f"--positions is empty; choose among {', '.join(POSITIONS)} (default: {','.join(DEFAULT_POSITIONS)})")
    unknown = [p for p in names if p not in POSITIONS]
    if unknown:
        raise GhostifyError(f"unknown --positions {', '.join(unknown)}; choose among {', '.join(POSITIONS)}")
    repeated = sorted({p for p in names if names.count(p) > 1})
    if repeated:
        raise GhostifyError(f"--positions lists {', '.join(repeated)} twice; name each position once")
    return tuple(p for p in POSITIONS if p in names)
