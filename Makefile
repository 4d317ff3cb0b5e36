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

# Compiling the packages' bytecode is most of an install's CPU (a minute of one core): pip does it
# on one core, compileall on every core. A file only a newer Python compiles (torch ships one) is
# passed over, as pip passes over it.
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU torch pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(BIN)/pip install -q --no-compile "$(TORCH)" -e ".[pipeline,test]"
	$(BIN)/python -c 'import compileall, sysconfig; compileall.compile_dir(sysconfig.get_path("purelib"), quiet=2, workers=0)'
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
	@$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & types=$$!; \
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) $(TEST_DIST); suite=$$?; \
	wait $$types; typed=$$?; echo "mypy:"; cat $(VENV)/mypy.log; [ $$suite -eq 0 ] && [ $$typed -eq 0 ]

bench: $(STAMP)
	$(BIN)/python bench/console.py

clean-demo:
	rm -rf configs/.eagle3-demo
