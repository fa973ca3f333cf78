# The two set-up commands (README): `make log` renders KERNEL_LOG.md, `make test` runs the tests.
PY ?= python3

.PHONY: setup log test gpu

# torch 2.13.0 is pinned for CPU machines (a CPU wheel); the GPU machine brings its own torch.
setup:
	$(PY) -m pip install -q torch==2.13.0 triton==3.6.0 -e '.[test]'

# The main job. Without a GPU it renders from the committed profiles/; on a GPU machine run
# `make gpu` first to capture what is missing.
log: setup
	$(PY) -m kernlog report

test: setup
	$(PY) -m ruff check kernlog kernels tests
	$(PY) -m pytest -q
	$(PY) -m kernlog report --check

# On a GPU machine with ncu (no install: uses the packages already there).
gpu:
	bash scripts/gpu.sh
