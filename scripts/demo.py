"""Main job until `spladekit quickstart` exists: diagnose a backbone and encode a small corpus.

Uses ../shared/models/splade-tiny-msmarco and the first 200 SciFact documents when present, otherwise
a tiny random-init BERT and a few built-in sentences. Output: demo-output/.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
OUT = ROOT / "demo-output"


def run(*args: str) -> None:
    print("$ spladekit", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "spladekit", *args], check=True)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    model = SHARED / "models" / "splade-tiny-msmarco"
    scifact = SHARED / "data" / "scifact" / "corpus.jsonl"
    corpus = OUT / "corpus.jsonl"
    if model.is_dir() and scifact.is_file():
        lines = scifact.read_text(encoding="utf-8").splitlines()[:200]
    else:
        sys.path.insert(0, str(ROOT / "tests"))
        from tiny_models import build_tiny_model

        model = build_tiny_model("bert", Path(tempfile.mkdtemp()) / "tiny-bert")
        texts = ["the capital of france is paris", "vaccines train the immune system", "the quick brown fox"]
        lines = [json.dumps({"_id": str(i), "text": t}) for i, t in enumerate(texts)]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run("diagnose", str(model), "--output", str(OUT / "diagnose.json"))
    run("encode", str(model), "--corpus", str(corpus), "--output", str(OUT / "vectors"), "--overwrite")
    print(f"\nwrote {OUT}/diagnose.json and {OUT}/vectors/")


if __name__ == "__main__":
    main()
