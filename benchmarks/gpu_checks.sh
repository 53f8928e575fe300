#!/bin/bash
# The GPU checks of issue 16 in one pass, on a CUDA machine, from the repository root:
#   CUDA tests, the base-size table at 256 tokens, the largest training batch in 16 GiB, bf16-autocast
#   nDCG@10 parity on SciFact (splade-tiny), and the 512-token table. Each step has its own time limit and
#   writes its log and JSON under RESULTS (default: gpu-results/), so one failing step does not hide the rest.
# Needs: python3 with torch (CUDA), transformers, sentence-transformers, pytest, ir_measures; the model and
# collection for the parity step (MODEL, DATA; default ../shared/...).
#   bash benchmarks/gpu_checks.sh                     # every step
#   STEPS="tests parity" bash benchmarks/gpu_checks.sh  # only these steps
RESULTS=${RESULTS:-gpu-results}
MODEL=${MODEL:-../shared/models/splade-tiny-msmarco}
DATA=${DATA:-../shared/data/scifact}
PYTHON=${PYTHON:-python3}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"

step() {  # step NAME SECONDS COMMAND...
  local name=$1 seconds=$2; shift 2
  if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then return; fi
  echo "=== $(date -u +%H:%M:%S) $name: $*"
  local started=$SECONDS
  timeout "$seconds" "$@" > "$RESULTS/$name.log" 2>&1
  local status=$?
  tail -n 25 "$RESULTS/$name.log"
  echo "=== $name: exit $status after $((SECONDS - started)) s"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
$PYTHON -c "import torch, transformers, sentence_transformers as st; print('torch', torch.__version__, 'cuda', torch.version.cuda, (torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device'), '| transformers', transformers.__version__, '| sentence-transformers', st.__version__)"
step tests 120 $PYTHON -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_devices.py \
  tests/test_pooling.py -k "cuda or device or autocast"
step bench-256 150 $PYTHON benchmarks/gpu_bench.py --length 256 --output "$RESULTS/bench-256.json"
step max-batch-16gib 150 $PYTHON benchmarks/gpu_bench.py --max-batch-gib 16 --length 256 \
  --configs sentence-transformers,fused,sentence-transformers+autocast,fused+autocast --output "$RESULTS/max-batch-16gib.json"
step parity 60 $PYTHON benchmarks/autocast_parity.py --model "$MODEL" --data "$DATA" --device cuda \
  --output "$RESULTS/parity.json"
step bench-512 90 $PYTHON benchmarks/gpu_bench.py --length 512 --batch 32 --configs sentence-transformers,fused,backbone \
  --output "$RESULTS/bench-512.json"
