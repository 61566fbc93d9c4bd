# Two commands: `make demo` (set up, run the main job on generated data) and `make test`.
# Both create or refresh the virtual environment in .venv/.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.ticktensor-installed
DEMO_STORE ?= build/demo-store

# CPU build of torch where there is no CUDA (a local wheel on our machines);
# the default CUDA build from the package index where a GPU driver is present.
ifeq ($(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo gpu),gpu)
TORCH_SPEC ?= torch>=2.4
else
TORCH_SPEC ?= torch==2.13.0
endif

# The editable install maps each module file, so a new .py file needs a reinstall too.
SOURCES := pyproject.toml CMakeLists.txt $(shell find native -type f 2>/dev/null) \
           $(shell find ticktensor schemas ingest loaders store -name '*.py' 2>/dev/null)

.PHONY: setup demo test lint typecheck bench-gather clean

setup: $(STAMP)

$(STAMP): $(SOURCES)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet "scikit-build-core>=0.10" "nanobind>=2.4" "cmake>=3.18" ninja
	flock $(VENV)/.install.lock $(PIP) install --quiet --no-build-isolation -e ".[dev]"
	$(PY) -c "import ticktensor, ticktensor._native"
	touch $(STAMP)

demo: setup
	$(VENV)/bin/ticktensor demo --out $(DEMO_STORE)

test: setup
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

typecheck: setup
	$(PY) -m pytest -q tests/test_quality.py

bench-gather: setup
	$(PY) benchmarks/gather.py

clean:
	rm -rf build $(VENV) .pytest_cache .mypy_cache .ruff_cache
