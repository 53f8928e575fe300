# One venv for everything; torch is pinned to the CPU wheel that lies on this disk
# (a plain `torch` requirement would pull a multi-GB CUDA build).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0

.PHONY: install test test-fast demo bench clean

$(BIN)/spladekit: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_PIN)
	$(BIN)/pip install --quiet -e ".[dev]" $(TORCH_PIN)
	# CIFF export (spladekit export ciff). ciff-toolkit pins protobuf<5, pymilvus needs protobuf>=5.27.2,
	# and ciff-toolkit works with the newer protobuf: installed without its dependencies, so it is not in
	# pyproject's extras (pip could not resolve them together).
	$(BIN)/pip install --quiet --no-deps ciff-toolkit==0.2.2
	# --backend anserini runs Anserini's fat jar, which pyserini's package carries (1.6.0: Anserini 1.7.1). Without
	# its dependencies: they are for pyserini's own JVM bridge (pyjnius), which spladekit does not use.
	$(BIN)/pip install --quiet --no-deps pyserini==1.6.0
	touch $@

install: $(BIN)/spladekit

# Static checks first (ruff lint and format, mypy: configured in pyproject.toml), then the whole suite with the
# 15 slowest tests named at the end.
test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "slow or not slow" --durations=15

# The edit loop: no end-to-end runs, torchrun or real-data evaluations (tests marked slow).
test-fast: install
	$(BIN)/python -m pytest -q --durations=15

# The main job: diagnose -> evaluate before -> train (auto-k) -> evaluate after -> plots + summary. With no
# --backbone/--train-data/--eval-data, quickstart uses ../shared (offline copies beside the repository) when it is
# there, else the public defaults from the Hugging Face hub and ir_datasets (README.md, "Quickstart defaults"):
# trained on SciFact's triplets, evaluated on the whole Cranfield collection. Sized to a few minutes on 2 CPU
# cores: documents evaluated at 128 tokens (encoding time is proportional to the tokens encoded).
# DEMO_ARGS adds or overrides options, e.g. make demo DEMO_ARGS="--steps 20".
DEMO_ARGS ?=
demo: install
	$(BIN)/spladekit quickstart --steps 50 --doc-max-length 128 --output demo-output --overwrite $(DEMO_ARGS)

# The summary table of docs/benchmarks.md, regenerated: runs the rows of benchmarks/registry.py that fit this machine
# (CPU rows; GPU rows where CUDA is), records the hardware with the results in docs/results/bench/, then rewrites the
# table from every machine's results there. Long (hours at the registered sizes); BENCH_ARGS picks rows or sizes,
# e.g. make bench BENCH_ARGS="--rows exact-search-100k", or BENCH_ARGS="--no-run" to only rewrite the table.
BENCH_ARGS ?=
bench: install
	$(BIN)/python -m benchmarks --update-docs $(BENCH_ARGS)

clean:
	rm -rf $(VENV) demo-output
