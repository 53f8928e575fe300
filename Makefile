# One venv for everything; torch is pinned to the CPU wheel that lies on this disk
# (a plain `torch` requirement would pull a multi-GB CUDA build).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0

.PHONY: install test demo clean

$(BIN)/spladekit: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_PIN)
	$(BIN)/pip install --quiet -e ".[dev]" $(TORCH_PIN)
	touch $@

install: $(BIN)/spladekit

# Static checks first (ruff, mypy: configured in pyproject.toml), then the whole default suite.
test: install
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

# The main job: diagnose -> rescale (auto-k) -> short training -> evaluate -> plots + summary, offline
# with the assets in ../shared (on a machine with the hub, pass other --backbone / --data).
demo: install
	$(BIN)/spladekit quickstart --backbone ../shared/models/splade-tiny-msmarco --data ../shared/data/scifact \
		--steps 100 --output demo-output --overwrite

clean:
	rm -rf $(VENV) demo-output
