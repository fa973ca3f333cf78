# The two set-up commands (README): `make log` renders KERNEL_LOG.md, `make test` runs the tests.
# Both install first, into the active virtualenv, or else into .venv here, created on first use
# (Debian's system Python refuses pip installs: PEP 668).
VENV ?= $(if $(VIRTUAL_ENV),$(VIRTUAL_ENV),.venv)
PY := $(VENV)/bin/python
LOCK := requirements-cpu.txt
# The CPU build, named by its local version label: PyPI's torch==2.13.0 is the CUDA build and
# pulls ~5.7 GB of nvidia-* wheels. pip's configured indexes are tried first (a mirror or
# find-links may hold it), then PyTorch's CPU index.
TORCH_CPU := torch==2.13.0+cpu
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
# The GPU machine's Python, which brings its own CUDA torch, triton, cupy and ncu (README, GPU install).
GPU_PY ?= python3

.PHONY: setup log test test-slow test-gpu lock gpu liger-wheel

$(PY):
	python3 -m venv $(VENV) || { echo "make: cannot create $(VENV); on Debian: apt-get install python3-venv" >&2; exit 1; }

# Installs again only when the lock or pyproject.toml changes (or: rm $(VENV)/.kernlog-setup).
$(VENV)/.kernlog-setup: $(LOCK) pyproject.toml | $(PY)
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	  || { echo "make: $(PY) is older than Python 3.11, which $(LOCK)'s pins need" >&2; exit 1; }
	@if $(PY) -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then \
	  echo "make: $(VENV) holds a working CUDA torch, which setup would replace with the CPU build;" \
	       "on a GPU machine see the README's GPU install" >&2; exit 1; fi
	$(PY) -m pip install -q $(TORCH_CPU) \
	  || { echo "make: $(TORCH_CPU) is not on pip's configured indexes; trying $(TORCH_CPU_INDEX)" >&2; \
	       $(PY) -m pip install -q --index-url $(TORCH_CPU_INDEX) $(TORCH_CPU); }
	$(PY) -m pip install -q -r $(LOCK) -e .
	touch $@

# The environment's kernlog must be this checkout's: an editable install made from another clone
# with the same environment (seen: a fresh clone tried with this .venv) leaves `kernlog` running
# that clone's code, while `python -m` from here runs this one's.
setup: $(VENV)/.kernlog-setup
	@(cd / && $(abspath $(PY)) -c 'import kernlog, pathlib, sys; sys.exit(pathlib.Path(kernlog.__file__).resolve().parent.parent != pathlib.Path(sys.argv[1]).resolve())' $(CURDIR)) \
	  || { echo "make: $(VENV)'s kernlog is another checkout's; installing this one (pip install --no-deps -e .)" >&2; \
	       $(PY) -m pip install -q --no-deps -e . ; }

# The main job. Without a GPU it renders from the committed profiles/; on a GPU machine run
# `kernlog profile KERNEL` (README, Profiling on a GPU), or a stage of `make gpu STAGE=...`, first.
log: setup
	$(PY) -m kernlog report

test: setup
	$(PY) -m ruff check kernlog kernels tests
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder
	$(PY) -m kernlog report --check

# The tests marked slow: the CPU interpreter at large shapes and every config compiled for sm_90.
# On the GPU machine (no install) the GPU is hidden so the Triton interpreter runs them, as on CI.
test-slow:
	CUDA_VISIBLE_DEVICES= $(GPU_PY) -m pytest -q --run-slow -m slow

# On the GPU machine (no install): the tests that need the GPU and ncu, then the slow suite.
test-gpu:
	$(GPU_PY) -m pytest -q -m "gpu or ncu"
	$(MAKE) test-slow

# Rewrites $(LOCK)'s pins from the environment (its comment lines kept); run after `make test` passes.
lock:
	{ grep '^#' $(LOCK); $(PY) -m pip freeze --exclude-editable | grep -v '^#'; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)

# Liger-Kernel's wheel into wheels/, for a GPU machine without network (scripts/gpu.sh liger).
LIGER := liger-kernel==0.8.5
liger-wheel: setup
	$(PY) -m pip download -q --no-deps $(LIGER) -d wheels

# On a GPU machine with ncu (no install: uses the packages already there): one stage of
# scripts/gpu.sh, e.g. `make gpu STAGE="profile softmax"` (its header lists the stages).
STAGE ?=
gpu:
	@test -n "$(STAGE)" || { echo 'make: name a stage of scripts/gpu.sh: make gpu STAGE="profile softmax" (check, sanitize, profile, bench, misses, liger, noise, retime, coldprofile, adopt)' >&2; exit 2; }
	bash scripts/gpu.sh $(STAGE)
