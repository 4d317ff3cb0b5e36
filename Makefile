# Everything a fresh machine needs: `make demo` and `make test` create the virtualenv.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH ?= torch==2.13.0
# In one process the suite keeps one of two cores busy on average, waiting on the stage programs
# it starts and on the conditions it polls; two workers kept 1.6 cores busy, three 1.9 (on 2 cores,
# 2026-12-07: 561 s and 524 s back to back on one tree, load 2-3), for 15 CPU-seconds more each
# (its own collection). Each worker takes whole files (loadfile: a module's fixture, a target or a
# trained drafter, is built once), in the order tests/conftest.py gives them: the files that start
# stage programs first, so no worker ends on a long file alone.
# `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 3
TEST_DIST := --dist loadfile --no-loadscope-reorder

.PHONY: demo test install bytecode console clean-demo bench

# pip compiles nothing: its compile of all of site-packages was a minute of one core, two thirds of
# it modules nothing here imports (transformers' model zoo, sympy, pip's vendored packages). What the
# console and a phase import is compiled here, by importing it where bytecode may be written (a third
# of that CPU); anything else compiles where it is first imported, and `make test` lets its
# processes write it.
WARM := torch transformers transformers.models.auto.modeling_auto transformers.models.auto.tokenization_auto \
	transformers.models.llama.modeling_llama safetensors.torch tokenizers yaml psutil textual.app \
	console.cli console.ui.app pytest xdist
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU torch pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(BIN)/pip install -q --no-compile "$(TORCH)" -e ".[pipeline,test]"
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c 'import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]' $(WARM)
	touch $(STAMP)
	@echo "eagle3 is installed in $(BIN)/; to have it on your PATH in this shell: . $(BIN)/activate"

install: $(STAMP)

# Where PYTHONDONTWRITEBYTECODE is set (as on the machines we build on), every process that imports
# the checkout (each CLI call, launcher and stage) would compile it anew; compile it once here.
# Files already compiled and unchanged are skipped.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q console pipeline themes tests bench

demo: $(STAMP) bytecode
	$(BIN)/eagle3 console configs/demo.yaml

# mypy (a minute of one core from a fresh clone) runs beside the suite, whose workers leave a
# core idle while they wait on the programs they start; its report follows the suite's, and
# either failing fails the target. tests/assertion_cache.py writes pytest's rewritten test modules
# once (4.5 CPU-seconds), which each worker would otherwise rewrite for itself where
# PYTHONDONTWRITEBYTECODE is set (8.5 CPU-seconds a worker, 2026-12-07).
test: $(STAMP) bytecode
	$(BIN)/python tests/assertion_cache.py
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	@env -u PYTHONDONTWRITEBYTECODE $(BIN)/mypy > $(VENV)/mypy.log 2>&1 & types=$$!; \
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) $(TEST_DIST); suite=$$?; \
	wait $$types; typed=$$?; echo "mypy:"; cat $(VENV)/mypy.log; [ $$suite -eq 0 ] && [ $$typed -eq 0 ]

bench: $(STAMP)
	$(BIN)/python bench/console.py

clean-demo:
	rm -rf configs/.eagle3-demo
