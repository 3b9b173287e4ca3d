#!/bin/bash
# compress on a lent GPU machine, in one call of this workplace's device tool (issue 46;
# benchmarks/results/gpu_h200.md). Runs there, from the repository root:
#
#   LIMIT=545 bash benchmarks/gpu_session.sh all:2 today:standard all:4 all:1
#
# each ARM:BUDGET a `benchmarks/budget_curve.py` run of SST-2 at 6x, seed 0, in the order given; a run starts only
# if it can end before LIMIT seconds have passed. What it writes to $OUT comes back: machine.txt, log.txt,
# budget_curve.jsonl (the rows), curve.md (the report) and reports.md (every run's report.md).
#
# Prepared here and carried (`carry`), since the machine reaches nothing and a call carries 64 MiB at most:
#   .gpu/teacher16/      the CPU's SST-2 teacher (WORK/sst2/run/01-teacher), its weights in float16 as
#                        model16.safetensors, every other file as it is (widened to float32 there)
#   .gpu/data/glue/sst2/ the task's parquet files, .gpu/today/ghostify: `git archive 5a6b1cc ghostify`
#   .whl/                wheels of what the image lacks (datasets, pydantic and their needs; device README)
set -u
T0=$(date +%s); DEADLINE=$((T0 + ${LIMIT:-545}))
export PYTHONUNBUFFERED=1
if [ "${WHEELS:-1}" = 1 ]; then  # WHEELS=0: a dry run here, with this machine's packages
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
W=/tmp/work; mkdir -p $W/sst2/run
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
{ date; uptime; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-400
  python3 -c 'import torch, transformers, onnxruntime, onnx; print("torch", torch.__version__, "transformers",
transformers.__version__, "onnxruntime", onnxruntime.__version__, "onnx", onnx.__version__)'
} > $OUT/machine.txt 2>&1
python3 - .gpu/teacher16 $W/sst2/run/01-teacher <<'PY' || exit 1
import shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model16.safetensors"), dirs_exist_ok=True)
weights = load_file(src / "model16.safetensors")
save_file({k: v.float() if v.is_floating_point() else v for k, v in weights.items()}, dst / "model.safetensors",
          metadata={"format": "pt"})
PY
log "teacher widened"
python3 -m ghostify latency $W/sst2/run/01-teacher --runtime onnx >> $OUT/log.txt 2>&1  # no budget pays for it
log "latency model built"
save() {
  cp $W/budget_curve.jsonl $OUT/ 2>/dev/null; : > $OUT/reports.md
  for d in $W/sst2/budget/*/; do
    [ -f $d/report.md ] && { echo "# $(basename $d)"; cat $d/report.md; echo; } >> $OUT/reports.md
  done
}
for run in "$@"; do
  arm=${run%%:*}; budget=${run#*:}
  case $arm in
    all) flags="--minutes ${budget%m}"; needs=$(( ${budget%m} * 60 + 30 )) ;;
    today) flags="--today-budgets $budget"; needs=150 ;;
    *) flags="--ablation-minutes ${budget%m}"; needs=$(( ${budget%m} * 60 + 30 )) ;;
  esac
  left=$(( DEADLINE - $(date +%s) ))
  if [ $left -lt $needs ]; then log "skipped $run: $left s left, it needs $needs"; continue; fi
  log "start $run"
  timeout $left python3 benchmarks/budget_curve.py --work $W --tasks sst2 --targets 6 --arms $arm $flags \
      --seeds 0 --data $PWD/.gpu/data --today $PWD/.gpu/today --runtime onnx --output $OUT/curve.md >> $OUT/log.txt 2>&1
  log "end $run rc=$?"; save
done
log "done"; uptime >> $OUT/machine.txt
