"""How far the ghost kernels move in training at the study's CPU budget (issue 15).

Runs the study's ``ghost`` and ``ghost-no-softmax`` arms for one (task, seed, width) with the
study's CPU budget, keeping their checkpoints, and compares each model right after
``attach-ghost`` with the fine-tuned result:

* the ghost kernels *as applied* (softmax-normalised, or as they are without softmax):
  relative change ``‖K − K₀‖ / ‖K₀‖`` over all ghost modules, and the largest change of one weight;
* every other weight of the model: the same relative change, for comparison.

Both arms start from the same applied kernels (1/k per tap), so where the kernels barely move the
two arms end at nearly the same model, which is what the ablation table shows.

    python benchmarks/ghost_kernel_drift.py --work runs/study-ghost-vs-pruned   # reuses the study's teacher and pruned model
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, machine_line  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def kernels_and_weights(model_dir: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The applied kernels of every ghost conv, and every other parameter, by name."""
    from ghostify.checkpoint import load_model
    from ghostify.methods.ghost.modules import GhostConv, GhostMapConv

    model = load_model(model_dir).eval()
    with torch.no_grad():
        kernels = {name: m.kernel().detach().clone() for name, m in model.named_modules()
                   if isinstance(m, (GhostConv, GhostMapConv))}
    weights = {name: p.detach().clone() for name, p in model.named_parameters()
               if not any(name.startswith(k + ".") for k in kernels)}
    return kernels, weights


def relative_change(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> tuple[float, float]:
    """``‖after − before‖ / ‖before‖`` over all tensors together, and the largest single change."""
    delta = torch.cat([(after[k] - before[k]).flatten() for k in before])
    base = torch.cat([before[k].flatten() for k in before])
    return float(delta.norm() / base.norm()), float(delta.abs().max())


def main(argv: list[str] | None = None) -> int:
    # here, not at the top: the study imports this module's measurements for its drift column
    from study_ghost_vs_pruned import PROTOCOLS, Arm, Study

    arms = (Arm("ghost", "3/12", {}), Arm("ghost-no-softmax", "3/12", {"softmax": False}))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "study-ghost-vs-pruned",
                        help="the study's checkpoints: its teacher and pruned model are reused or made")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    protocol = PROTOCOLS["cpu"]
    study = Study(protocol["model"], protocol["dataset"], args.work, args.work / "drift-results", protocol["budget"], keep=True)
    print(f"Machine: {machine_line(machine_info())}\n")
    print(f"{args.task}, seed {args.seed}, width 3/12, the study's CPU budget\n")
    print("| arm | score | ghost kernels: relative change | largest kernel change | other weights: relative change |")
    print("|---|---|---|---|---|")
    for arm in arms:
        result = study.run_arm(args.task, args.seed, arm)
        root = study.arm_dir(args.task, args.seed, arm)
        kernels0, weights0 = kernels_and_weights(root / "ghost")
        kernels1, weights1 = kernels_and_weights(root / "final")
        kernel_change, kernel_max = relative_change(kernels0, kernels1)
        weight_change, _ = relative_change(weights0, weights1)
        print(f"| {arm.name} | {result['score']:.2f} | {kernel_change:.2%} | {kernel_max:.4f} | {weight_change:.2%} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
