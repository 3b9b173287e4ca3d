"""Parameters and FLOPs of base-sized random models before and after ``prune --width 3/12`` and
``attach-ghost`` (the README's tables): BERT-base (``BertConfig()``) and a ModernBERT-base-sized
``ModernBertConfig()`` (22 layers, hidden 768, 12 heads, FFN 1152). FLOPs are measured
(``ghostify.flops.measure``: batch 1, sequence 128, embedding lookup excluded) and do not depend on
the weights or the machine.

    python benchmarks/sizes.py            # ~1 min on 2 cores
"""

from __future__ import annotations

import argparse
import copy
from fractions import Fraction

import torch


def rows(model_type: str) -> list[tuple[str, int, int, int]]:
    """(stage, params, ghost params, FLOPs) for the dense, pruned and ghosted model."""
    from transformers import AutoConfig, AutoModel

    from ghostify.architectures import get_adapter
    from ghostify.flops import measure
    from ghostify.methods.ghost import GhostSettings, attach_ghosts, ghost_params
    from ghostify.methods.pruning import magnitude_importance
    from ghostify.methods.pruning.apply import dense_record, prune

    torch.manual_seed(0)
    model = AutoModel.from_config(AutoConfig.for_model(model_type)).eval()
    adapter = get_adapter(model.config)
    out = []
    size = measure(model)
    out.append(("dense 12/12", size.params, 0, size.flops))
    _, record = prune(model, dense_record(model, adapter), magnitude_importance(model, adapter),
                      heads_width=Fraction(3, 12), ffn_width=Fraction(3, 12))
    size = measure(model)
    out.append(("prune --width 3/12", size.params, 0, size.flops))
    ghosted = copy.deepcopy(model)
    attach_ghosts(ghosted, GhostSettings())
    size = measure(ghosted)
    out.append(("+ attach-ghost (o, ffn2; k = 3)", size.params, ghost_params(ghosted), size.flops))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="bert,modernbert", help="comma-separated model types")
    args = parser.parse_args(argv)
    print("| model | stage | params | ghost params | FLOPs (seq 128) |")
    print("|---|---|---|---|---|")
    for family in args.families.split(","):
        for stage, params, ghosts, flops in rows(family.strip()):
            print(f"| {family} | {stage} | {params / 1e6:.2f}M | {ghosts:,} | {flops / 1e9:.2f}G |")


if __name__ == "__main__":
    main()
