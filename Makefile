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

test: install
	$(BIN)/python -m pytest -q

demo: install
	$(BIN)/python scripts/demo.py

clean:
	rm -rf $(VENV) demo-output
