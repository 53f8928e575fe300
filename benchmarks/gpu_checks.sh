#!/bin/bash
# The GPU checks in one pass, on a CUDA machine, from the repository root. Each step has its own time limit and
# writes its log and JSON under RESULTS (default: gpu-results/), so one failing step does not hide the rest.
# Needs: python3 with torch (CUDA), triton, transformers, sentence-transformers, pytest, hypothesis, ir_measures.
#
# Inputs come from SHARED (default ../shared). A GPU machine that receives only the repository gets a copy:
#   STEPS=assets bash benchmarks/gpu_checks.sh          # here: copies what the steps read into gpu-assets/ (6 MB)
#   SHARED=gpu-assets bash benchmarks/gpu_checks.sh     # there (carry gpu-assets/: its wheels are installed)
#
# Issue 27's steps (the default; their time limits add up to 570 s, 9.5 minutes):
#   kernels        the Triton head, the dense-block backward and the CUDA tests on the GPU
#   head-30k/50k   the head alone at BERT-base / ModernBERT-base vocabularies, bf16 autocast, three sparsities:
#                  sentence-transformers, fused (sparse backward), fused-adaptive, fused-dense, triton
#   real-bert      BERT-base at real MS MARCO lengths, bf16 autocast, at initialisation and trained sparsity:
#                  sentence-transformers against padded, packed, packed + triton, packed + adaptive
#   real-modernbert  the same for ModernBERT-base (padded, packed, packed + triton)
# Issue 16's steps (STEPS="tests bench-256 max-batch-16gib parity bench-512"): the base-size table at 256 tokens, the
# largest training batch in 16 GiB, bf16-autocast nDCG@10 parity on SciFact (splade-tiny), the 512-token table.
RESULTS=${RESULTS:-gpu-results}
SHARED=${SHARED:-../shared}
MODEL=${MODEL:-$SHARED/models/splade-tiny-msmarco}
DATA=${DATA:-$SHARED/data/scifact}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-kernels head-30k head-50k real-bert real-modernbert}
export PYTHONUNBUFFERED=1 PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"

if [ "$STEPS" = assets ]; then
  for part in backbone-files/bert-base-uncased backbone-files/ModernBERT-base data/trec-dl-2019-subset \
      data/msmarco-passage-queries-qrels; do
    mkdir -p "gpu-assets/$(dirname "$part")" && cp -r "$SHARED/$part" "gpu-assets/$part"
  done
  # spladekit's dependencies that the H200 image lacks (its python is 3.12), installed there from these wheels
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d gpu-assets/wheels \
    ir_measures==0.4.3 pytrec-eval-terrier==0.5.11 bm25s==0.3.16
  grep -qx '/gpu-assets/' .git/info/exclude 2>/dev/null || echo /gpu-assets/ >> .git/info/exclude
  du -sh gpu-assets
  exit 0
fi
mkdir -p "$RESULTS"
if [ -d "$SHARED/wheels" ]; then
  $PYTHON -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$SHARED"/wheels/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi

step() {  # step NAME SECONDS COMMAND...
  local name=$1 seconds=$2; shift 2
  if [[ " $STEPS " != *" $name "* ]]; then return; fi
  echo "=== $(date -u +%H:%M:%S) $name: $*"
  local started=$SECONDS
  timeout "$seconds" "$@" > "$RESULTS/$name.log" 2>&1
  local status=$?
  tail -n 25 "$RESULTS/$name.log"
  echo "=== $name: exit $status after $((SECONDS - started)) s"
}

INPUTS=(--passages "$SHARED/data/trec-dl-2019-subset/corpus.jsonl"
        --queries "$SHARED/data/msmarco-passage-queries-qrels/queries-dev-small.jsonl")
HEADS=sentence-transformers,fused,fused-adaptive,fused-dense,triton

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
$PYTHON -c "import torch, triton, transformers, sentence_transformers as st; print('torch', torch.__version__, 'cuda', torch.version.cuda, (torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device'), '| triton', triton.__version__, '| transformers', transformers.__version__, '| sentence-transformers', st.__version__)"
step kernels 90 $PYTHON -m pytest -q -p no:cacheprovider tests/test_triton_head.py tests/test_cuda.py \
  tests/test_pooling.py tests/test_train_loop.py -k "triton or dense_backward or head_implementations or cuda or autocast"
step head-30k 60 $PYTHON benchmarks/head_split_bench.py --device cuda --texts 96 --length 180 --hidden 768 \
  --vocab 30522 --active init,2000,200 --heads $HEADS --autocast
step head-50k 60 $PYTHON benchmarks/head_split_bench.py --device cuda --texts 96 --length 180 --hidden 768 \
  --vocab 50368 --active init,2000,200 --heads $HEADS --autocast
step real-bert 200 $PYTHON benchmarks/real_inputs.py --device cuda --bf16 --backbone-files \
  "$SHARED/backbone-files/bert-base-uncased" "${INPUTS[@]}" --active init,200 --batch 32 --steps 5 --rounds 1 \
  --encode-docs 512 --length-groups 1,packed,packed+triton,packed+adaptive --output "$RESULTS/real-bert.json"
step real-modernbert 160 $PYTHON benchmarks/real_inputs.py --device cuda --bf16 --backbone-files \
  "$SHARED/backbone-files/ModernBERT-base" "${INPUTS[@]}" --active init,200 --batch 32 --steps 5 --rounds 1 \
  --encode-docs 512 --length-groups 1,packed,packed+triton --output "$RESULTS/real-modernbert.json"

step tests 120 $PYTHON -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_devices.py \
  tests/test_pooling.py -k "cuda or device or autocast"
step bench-256 150 $PYTHON benchmarks/gpu_bench.py --length 256 --output "$RESULTS/bench-256.json"
step max-batch-16gib 150 $PYTHON benchmarks/gpu_bench.py --max-batch-gib 16 --length 256 \
  --configs sentence-transformers,fused,sentence-transformers+autocast,fused+autocast --output "$RESULTS/max-batch-16gib.json"
step parity 60 $PYTHON benchmarks/autocast_parity.py --model "$MODEL" --data "$DATA" --device cuda \
  --output "$RESULTS/parity.json"
step bench-512 90 $PYTHON benchmarks/gpu_bench.py --length 512 --batch 32 --configs sentence-transformers,fused,backbone \
  --output "$RESULTS/bench-512.json"
