# The two commands of the README:  make demo  (embedded end-to-end job)  and  make test  (the test suite).
# Both create the virtual environment they need first (.venv, about 6 GB with torch's CUDA build).
PY      := .venv/bin/python
STAMP   := .venv/.mmrl-installed
PIP     := $(PY) -m pip --disable-pip-version-check -q

.PHONY: setup demo base test test-fast mutation bench-demo clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PIP) install torch==2.14.1 torchvision==0.29.1
	$(PIP) install -e ".[dev,bench]"
	$(PIP) install deepspeed==0.19.8 || echo "deepspeed not installed: the 2-rank DeepSpeed test will be skipped"
	touch $(STAMP)

demo: setup
	$(PY) -m mmrl demo --out runs/demo

# The tiny base that can see (docs/base_model.md): built once per recipe, cached under its hash in $MMRL_CACHE
# (~/.cache/mmrl); RECIPE= a recipe YAML, BASE_ARGS= recipe overrides (e.g. BASE_ARGS="steps=10 n_train=16").
base: setup
	OMP_NUM_THREADS=2 $(PY) -m mmrl base build $(if $(RECIPE),--recipe $(RECIPE)) $(BASE_ARGS)

test: setup
	$(PY) -m pytest -q -p no:cacheprovider

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

# Mutation testing of the modules that decide rewards, updates, frames, checkpoints, views and annotations
# (docs/testing.md): one worker, MUTATION_BUDGET minutes per module group; not part of CI. GROUPS= picks groups.
MUTATION_BUDGET ?= 20
mutation: setup
	OMP_NUM_THREADS=1 $(PY) scripts/mutation.py --budget-min $(MUTATION_BUDGET) $(GROUPS)

bench-demo: setup
	$(PY) bench/demo_seeds.py --out runs/demo_seeds

clean:
	rm -rf runs .pytest_cache
