# agentpost: `make book` builds the book from a fresh clone; `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
JOBS   ?= 2

.PHONY: book test test-fast lab bench lint ledger clean-runs

$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# Keep an installed torch (e.g. a CUDA build); otherwise take the pinned release.
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	# ray and slurm (submitit): the scale-out backends, tested in tests/e2e/test_backends.py (~30 s, ~300 MB more)
	$(BIN)/python -m pip install -q -e '.[dev,minihack,ray,slurm]'
	@touch $@

book: $(STAMP)
	$(BIN)/agentpost book --jobs $(JOBS)

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests
	$(BIN)/python -m pytest -q -p no:cacheprovider -p tests.notebooks.glue_regression --nbval-lax --nbval-sanitize-with tests/notebooks/sanitize.cfg notebooks

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

ledger: $(STAMP)
	$(BIN)/agentpost ledger

clean-runs:
	rm -rf book/runs/*/smoke _build
