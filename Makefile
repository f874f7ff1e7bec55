# Two commands do all the set-up: `make run` and `make test`.
# Each creates the virtual environment in .venv if it is missing or stale.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest demo clean secrets docs

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/proxy serve

demo: $(STAMP)
	$(BIN)/proxy demo

lint: $(STAMP)
	$(BIN)/ruff check proxy tests $(wildcard benchmarks migrations)

typecheck: $(STAMP)
	$(BIN)/mypy proxy

# Three pytest-xdist workers on two cores: the suite mostly waits on its child processes
# (40 % of one core when serial). Each file stays on one worker, the heaviest first
# (tests/conftest.py); docs/test-suite.md says what runs serially and why.
# `make pytest PYTEST_PARALLEL=` runs it serially; a plain `pytest` is serial too. The 25
# slowest phases are listed at the end: where the time goes (issue 48).
PYTEST_PARALLEL ?= -n 3 --dist loadgroup

pytest: $(STAMP)
	$(BIN)/pytest $(PYTEST_PARALLEL) --durations=25

test: lint typecheck pytest

# The docs site (mkdocs.yml), offline; tests/test_docs_site.py runs the same build in CI.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict -d site

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache site

# The compose deployment's file secret (docker-compose.yml): a random metrics token that
# the proxy and Prometheus both read. Kept if it exists; 0644 inside a 0700 folder, so the
# containers' users (fmp, nobody) can read it and nobody else on this machine can.
secrets: secrets/metrics_token

secrets/metrics_token:
	@mkdir -p -m 700 secrets
	@$(PYTHON) -c 'import secrets; print(secrets.token_hex(24))' > $@.tmp
	@chmod 644 $@.tmp && mv $@.tmp $@
	@echo "made $@"
