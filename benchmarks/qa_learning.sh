#!/usr/bin/env bash
# What a 3x QA student learns from, for its time (issue 46; benchmarks/results/qa_learning.md): the pruned SQuAD-part
# student of a `--budget 20m` compress run, fine-tuned with the teacher's logits (weight 0.5) and the labels at three
# learning rates, for 1 and 2 epochs; the teacher store shared, so the teacher runs once over all four arms.
#   bash benchmarks/qa_learning.sh PRUNED TEACHER DATASET WORK
# PRUNED: `stages/04-prune` of `python benchmarks/budget_curve.py --tasks squad --targets 3 --minutes 20
# --arms one-stage`; TEACHER: its `run/01-teacher`; DATASET: ../shared/data/squad-v1.1-part. Each arm is resumable
# (an arm whose output exists is skipped). One arm at a time; torch's default threads.
set -euo pipefail
pruned=$1 teacher=$2 dataset=$3 work=$4
mkdir -p "$work"
arm() {  # NAME LEARNING_RATE EPOCHS
    [ -d "$work/$1" ] && return
    uptime > "$work/$1.log"
    python -m ghostify finetune "$pruned" -o "$work/$1" --task squad --dataset "$dataset" --max-length 256 \
        --doc-stride 64 --teacher "$teacher" --teacher-weight 0.5 --learning-rate "$2" --epochs "$3" \
        --teacher-store "$work/store" --seed 0 >> "$work/$1.log" 2>&1
    uptime >> "$work/$1.log"
}
arm ft3e4 3e-4 1
arm ft3e4x2 3e-4 2
arm ft1e4x2 1e-4 2
arm ft5e4x2 5e-4 2
python - "$work" <<'PY'
import json, sys
from pathlib import Path
for arm in ("ft3e4", "ft3e4x2", "ft1e4x2", "ft5e4x2"):
    t = json.loads((Path(sys.argv[1]) / arm / "training.json").read_text())
    scores = ", ".join(f"epoch {e['epoch']}: F1 {e['eval']['f1']:.1f}" for e in t["evaluations"])
    walls = ", ".join(f"{e['wall']:.0f}" for e in t["epoch_seconds"])
    print(f"{arm}: {scores}; wall s per epoch {walls}")
PY
