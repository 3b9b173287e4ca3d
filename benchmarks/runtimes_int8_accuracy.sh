#!/usr/bin/env bash
# Int8 accuracy per runtime against fp32 (ONNX Runtime dynamic int8, OpenVINO NNCF static int8) on STS-B
# embeddings, for the dense MiniLM and its 2x compress result, and on CoNLL-2003 for a tagger and its 3x result; then
# 3x and 6x SST-2 compress results against their teacher in both int8 runtimes, timed side by side (the FLOP ratio
# against the measured speed-up; nothing else may run beside the timing). Results:
# benchmarks/results/runtimes_int8.md. The models (set them in the environment):
#   X2      the 2x STS-B result: ghostify compress ../shared/models/all-MiniLM-L6-v2 -o x2 --task embeddings
#           --dataset ../shared/data/glue/stsb --text-columns sentence1,sentence2 --speedup 2 --budget 15m
#           (X2=x2/stages/08-final)
#   TEACHER the SST-2 teacher of benchmarks/retraining_free.py (WORK/sst2/run/01-teacher)
#   X6      its 6x result: python benchmarks/budget_curve.py --work WORK --tasks sst2 --targets 6 --minutes 20
#           --arms all (X6=WORK/sst2/budget/all-20m-x6-s0/stages/14-final)
#   CONLL_T, CONLL_X3, X3  further down
#   W       where the exports and results go
set -euo pipefail
cd "$(dirname "$0")/.." && . .venv/bin/activate
export OMP_NUM_THREADS=1
SHARED=${SHARED:-$(pwd)/../shared}
W=${W:-/work/runs/rt47}
X2=${X2:-/work/runs/emb/x2/stages/08-final}
TEACHER=${TEACHER:-/work/runs/rf/sst2/run/01-teacher}
X6=${X6:-/work/runs/rf/sst2/budget/all-20m-x6-s0/stages/14-final}
# each step is skipped where its output exists (the script resumes; delete a file to measure it again)
both_int8() {  # MODEL NAME EXPORT-FLAGS...: W/NAME-ort (ONNX Runtime dynamic int8) and W/NAME-ov (OpenVINO NNCF int8)
  local model=$1 name=$2; shift 2
  [ -d $W/$name-ort ] || ghostify export $model -o $W/$name-ort --format onnx --quantize int8 "$@"
  [ -d $W/$name-ov ] || ghostify export $model -o $W/$name-ov --format openvino --quantize int8 "$@"
}
score() {  # LABEL GRAPH EVAL-FLAGS...: its metrics, kept in W/eval<path>.json
  local label=$1 graph=$2 key; shift 2
  key=$(echo $graph | tr '/' '_')
  [ -f $W/eval$key.json ] || ghostify eval $graph "$@" --json > $W/eval$key.json
  echo "$label $graph $(python -c "import json; print(json.load(open('$W/eval$key.json'))['metrics'])")"
}
timed() {  # OUT GRAPHS...: timed taking turns, batch 1 x 128, 1 thread
  local out=$1; shift
  uptime
  [ -f $W/$out ] || ghostify bench "$@" --seq-len 128 --threads 1 --rounds 60 --warmup 5 --json > $W/$out
  uptime
}

DATA=(--task embeddings --dataset $SHARED/data/glue/stsb --text-columns sentence1,sentence2)
for name in dense x2; do
  if [ $name = dense ]; then M=$SHARED/models/all-MiniLM-L6-v2; else M=$X2; fi
  both_int8 $M $name "${DATA[@]}"
  for g in $M $W/$name-ort/model.onnx $W/$name-ort/model_int8.onnx $W/$name-ov/model.xml $W/$name-ov/model_int8.xml; do
    score $name $g "${DATA[@]}"
  done
done

# item 4: the 6x SST-2 model of the budget curve against the dense teacher, in ONNX Runtime int8 and OpenVINO int8,
# timed side by side (batch 1 x 128, 1 thread); plus SST-2 accuracy of the OpenVINO int8 graph
S=(--task sst2 --dataset $SHARED/data/glue)
T=$TEACHER; C=$X6
both_int8 $T t "${S[@]}"
both_int8 $C c "${S[@]}"
for g in $W/c-ort/model_int8.onnx $W/c-ov/model_int8.xml $C; do score x6 $g "${S[@]}"; done
timed bench_x6.json $W/t-ort/model_int8.onnx $W/c-ort/model_int8.onnx $W/t-ov/model_int8.xml $W/c-ov/model_int8.xml
ghostify info $T --json > $W/info_t.json; ghostify info $C --json > $W/info_c.json

# item 2 on NER and item 4 at 3x: the CoNLL-2003 teacher and its 3x budget-curve result (F1 in each int8 runtime
# against fp32), and the SST-2 3x result timed against its teacher like the 6x one above
#   CONLL_T  WORK/conll2003/run/01-teacher;  CONLL_X3  WORK/conll2003/budget/all-20m-x3-s0/stages/NN-final
#   X3       WORK/sst2/budget/all-20m-x3-s0/stages/NN-final
CONLL_T=${CONLL_T:-/work/runs/rf/conll2003/run/01-teacher}
CONLL_X3=${CONLL_X3:-$(ls -d /work/runs/rf/conll2003/budget/all-20m-x3-s0/stages/*-final 2>/dev/null | head -1)}
X3=${X3:-$(ls -d /work/runs/rf/sst2/budget/all-20m-x3-s0/stages/*-final | head -1)}
NX=(--task conll2003 --dataset $SHARED/data/conll2003 --max-length 128)  # export calibrates on the text alone
N=("${NX[@]}" --tags-column ner_labels --tag-scheme IOB2)
for name in conll-t conll-x3; do
  if [ $name = conll-t ]; then M=$CONLL_T; else M=$CONLL_X3; fi
  [ -d "$M" ] || { echo "skipping $name: no model at '$M'"; continue; }
  both_int8 $M $name "${NX[@]}"
  for g in $M $W/$name-ort/model_int8.onnx $W/$name-ov/model_int8.xml; do score $name $g "${N[@]}"; done
done
both_int8 $X3 c3 "${S[@]}"
for g in $W/c3-ort/model_int8.onnx $W/c3-ov/model_int8.xml $X3; do score x3 $g "${S[@]}"; done
timed bench_x3.json $W/t-ort/model_int8.onnx $W/c3-ort/model_int8.onnx $W/t-ov/model_int8.xml $W/c3-ov/model_int8.xml
ghostify info $X3 --json > $W/info_c3.json
