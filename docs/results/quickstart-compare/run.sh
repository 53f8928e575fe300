#!/usr/bin/env bash
# quickstart --compare on an inflated splade-tiny (its MLM transform's output × 8). Run from the repository root;
# writes /tmp/quickstart-compare/{tinyT-x8,qs}.
# The summary table and compare.png are copied beside this script.
set -euo pipefail
STEPS=${STEPS:-200}
OUT=${OUT:-/tmp/quickstart-compare}
mkdir -p "$OUT"
.venv/bin/python - "$OUT/tinyT-x8" <<'PY'
import sys

from spladekit import SparseEncoder
from spladekit.experiments.inflate import inflate

encoder = SparseEncoder.from_pretrained("../shared/models/splade-tiny-msmarco")
inflate(encoder.model, 8, "transform")
encoder.save(sys.argv[1], overwrite=True)
PY
.venv/bin/spladekit quickstart --backbone "$OUT/tinyT-x8" --compare --steps "$STEPS" --doc-max-length 128 \
    --output "$OUT/qs" --overwrite --no-progress
cp "$OUT/qs/summary.md" "$OUT/qs/compare.png" "$(dirname "$0")/"
