"""Replay the current CollapseDetector over committed metrics.jsonl logs: the first shape it declares, or None.

    python docs/results/head-only-inflation/replay_detector.py docs/results/head-only-inflation/runs/*/metrics.jsonl
"""

import json
import sys

from spladekit.training.monitors import CollapseDetector

VOCAB_SIZE = 30522  # splade-tiny-msmarco (BERT vocabulary)

for path in sorted(sys.argv[1:]):
    detector = CollapseDetector(VOCAB_SIZE)
    found = None
    with open(path) as lines:
        for line in lines:
            record = json.loads(line)
            if "loss" in record and found is None and (result := detector.update(record)):
                found = (record.get("step"), result[0])
    print(path.split("/")[-2], found)
