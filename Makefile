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

# Unit and kernel tests (Triton interpreter on CPU) without the `slow` ones: the loop while editing code.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow" tests/unit tests/kernels

# ruff's formatter and linter (rules in pyproject.toml), mypy on the shared core ([tool.mypy]), the import layers
# ([tool.importlinter]: the shared core imports no paper; papers not each other; agentpost.record imports nothing of
# the rest) and the kernels' part of them that import-linter cannot see (tests/unit/test_layering.py). Formatting
# stales no run: runs are judged by their code's syntax tree (book/receipts.md).
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_layering.py

# JupyterLab on notebooks/, where each chapter page's "Open in JupyterLab" button points (agentpost_lab_url in
# _config.yml; README, "From a book page into the running notebook"). LAB_TOKEN: a fixed token instead of a random one.
LAB_PORT  ?= 8888
LAB_TOKEN ?=
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks --ServerApp.ip=127.0.0.1 --ServerApp.port=$(LAB_PORT) --ServerApp.port_retries=0 \
		$(if $(LAB_TOKEN),--IdentityProvider.token=$(LAB_TOKEN))

# Every benchmark with quick CPU settings, then one long-format table (benchmarks/run_all.py --full: own defaults).
bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

ledger: $(STAMP)
	$(BIN)/agentpost ledger

clean-runs:
	rm -rf book/runs/*/smoke _build
