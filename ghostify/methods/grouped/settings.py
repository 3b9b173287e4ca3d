"""Grouped layers: settings, their validation and the record format (see :mod:`ghostify.methods.grouped`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import GhostifyError
from ..base import setting

GROUPED_RECORD_FORMAT = 1


#: user-facing module names -> LayerPaths attributes (those a family has: fused Q/K/V is ``qkv``,
#: a gated FFN adds ``ffn_gate``)
MODULES: dict[str, tuple[str, ...]] = {
    "qkv": ("query", "key", "value", "qkv"),
    "o": ("attention_output",),
    "ffn": ("ffn_up", "ffn_gate", "ffn_down"),
}


# ----------------------------------------------------------------------------------------------
# options
# ----------------------------------------------------------------------------------------------
def parse_modules(modules: str | Sequence[str]) -> list[str]:
    """``"qkv,ffn"`` -> ``["qkv", "ffn"]`` (validated, in canonical order)."""
    names = [m.strip() for m in (modules.split(",") if isinstance(modules, str) else modules) if m and m.strip()]
    unknown = [m for m in names if m not in MODULES]
    if unknown or not names:
        raise GhostifyError(
            f"--modules {','.join(names) or repr(modules)}: {'unknown ' + ', '.join(unknown) if unknown else 'none given'}; "
            f"choose among {', '.join(MODULES)} (comma-separated, e.g. qkv,ffn)"
        )
    return [m for m in MODULES if m in names]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_groups(groups: int, dims: dict[str, set[int]]) -> None:
    """``dims`` maps a module name to the widths its projections have (every layer)."""
    if groups < 1:
        raise GhostifyError(f"--groups {groups}: must be at least 1 (1 keeps the layers dense)")
    bad = {name: sorted(d for d in widths if d % groups) for name, widths in dims.items()}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        common = math.gcd(*[d for widths in dims.values() for d in widths])
        name, widths = next(iter(bad.items()))
        raise GhostifyError(
            f"--groups {groups} does not divide the {name} width {widths[0]}; valid --groups for "
            f"--modules {','.join(dims)} on this model: {', '.join(map(str, _divisors(common)))}"
        )


def module_widths(config, record: Any, modules: Sequence[str]) -> dict[str, set[int]]:
    """The input and output widths of the chosen projections in every layer, from the config and
    the record alone (for checking --groups before loading weights)."""
    from ...architectures import get_adapter  # loads torch: the CLI reads MODULES at start-up without it

    adapter = get_adapter(config)
    paths = adapter.paths(config)
    hidden, head_size, unit_width = adapter.hidden_size(config), adapter.head_size(config), adapter.unit_width(config)
    units = record.heads_per_layer if record is not None else [adapter.num_units(config)]
    ffn = list(record.ffn) if record is not None else [adapter.ffn_size(config)]
    qkv = ({u * (unit_width + 2 * head_size) for u in units} if paths.qkv
           else {w for u in units for w in (u * unit_width, u * head_size)})
    widths = {
        "qkv": {hidden, *qkv},
        "o": {hidden, *(u * unit_width for u in units)},
        "ffn": {hidden, *ffn, *((2 * f for f in ffn) if paths.ffn_up_gated else ())},
    }
    return {name: widths[name] for name in modules}


@dataclass(frozen=True)
class GroupSettings:
    """Which projections ``group-linear`` groups, into how many blocks."""

    groups: int = setting(4, min=1, help="G: blocks on the diagonal; parameters and FLOPs of the grouped layers fall by G.")
    modules: str = setting("qkv,ffn", help=f"Comma-separated, among {', '.join(MODULES)}: query/key/value, attention "
                           "output, both FFN projections.")
    permute: bool = setting(True, flag="--permute/--no-permute", help="Reorder channels so the blocks keep the most "
                            "weight norm (residual-stream orders cost a gather at run time).")
