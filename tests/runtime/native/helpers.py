"""Checking the native backend: build an ONNX graph, run it through the
native backend (the Program compiled to C) and compare with the NumPy
Executor and onnxruntime; build emitted C with make and run the executable
with nothing from the Python environment."""
import glob
import hashlib
import importlib
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import tempfile

import numpy
import onnxruntime
from onnx import helper, numpy_helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor

RTOL, ATOL = 1e-4, 1e-5


def uniform(rng, *shape):
    """float32 values drawn uniformly from [-1, 1) by ``rng``."""
    return rng.uniform(-1, 1, shape).astype(numpy.float32)


def make_model(nodes, inputs, outputs, initializers=(), opset=13, custom=False):
    """A ModelProto: ``inputs``/``outputs`` are (name, numpy dtype, shape);
    ``initializers`` maps name -> array; ``custom``: this project's domain
    (org.chainer_compiler) is imported too."""
    def info(name, dtype, shape):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(numpy.dtype(dtype)), shape)
    graph = helper.make_graph(
        nodes, 'native_check', [info(*i) for i in inputs], [info(*o) for o in outputs],
        [numpy_helper.from_array(numpy.asarray(a), n) for n, a in dict(initializers).items()])
    opsets = [helper.make_opsetid('', opset)]
    if custom:
        opsets.append(helper.make_opsetid('org.chainer_compiler', 1))
    return helper.make_model(graph, opset_imports=opsets)


def without_nchwc_chains(monkeypatch):
    """Emit without the NCHWc pass (blocked.py), for a test of the NCHW
    kernels whose Convs would otherwise join chains."""
    emitter = importlib.import_module('chainer_compiler.runtime.native.emit_c')
    monkeypatch.setattr(emitter, 'block_chains', lambda program: program)


def check_native(model, inputs, rtol=RTOL, atol=ATOL, onnxruntime_check=True):
    """Run ``model`` (a ModelProto) on ``inputs`` (arrays, graph order)
    through backend 'native'; assert the outputs equal the NumPy Executor's
    and onnxruntime's in dtype, shape and value.  Returns the native
    outputs."""
    program = build_program(model)
    got = Executor(program, backend='native').run_positional(list(inputs))
    # The reference runs one instruction per node: no rule the two share.
    want = Executor(build_program(model, fuse=False), backend='numpy').run_positional(
        list(inputs))
    references = [('numpy', want)]
    if onnxruntime_check:
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=['CPUExecutionProvider'])
        feed = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
        references.append(('onnxruntime', session.run(None, feed)))
    for runtime, outputs in references:
        assert len(got) == len(outputs)
        for v, g, w in zip(program.outputs, got, outputs):
            w = numpy.asarray(w)
            assert g.dtype == w.dtype and g.shape == w.shape, (runtime, v.name, g.dtype,
                                                               g.shape, w.dtype, w.shape)
            numpy.testing.assert_allclose(g, w, rtol=rtol, atol=atol,
                                          err_msg='%s vs %s' % (v.name, runtime))
    return got


#: What the executable sees: nothing from the Python environment.
CLEAN_ENV = {'PATH': '/usr/bin:/bin'}


class Built:
    """An emitted and built model: its Program, folder, executable, the
    emit result and the make output."""

    def __init__(self, program, folder, name, result, make_output):
        self.program, self.folder, self.name = program, folder, name
        self.result, self.make_output = result, make_output
        self.exe = os.path.join(folder, name)

    def run(self, args, cwd=None):
        return subprocess.run([self.exe] + [str(a) for a in args], env=CLEAN_ENV, cwd=cwd,
                              capture_output=True, text=True, timeout=60)

    def check_against_executor(self, inputs, tmp):
        paths = []
        for k, x in enumerate(inputs):
            paths.append(tmp / ('in_%d.npy' % k))
            numpy.save(paths[-1], x)
        out = tmp / 'out'
        done = self.run(['-o', out] + paths)
        assert done.returncode == 0, done.stderr
        want = Executor(self.program).run_positional(inputs)
        for v, w in zip(self.program.outputs, want):
            got = numpy.load(out / (sanitize(v.name) + '.npy'))
            assert got.dtype == w.dtype and got.shape == w.shape, v.name
            numpy.testing.assert_allclose(got, w, rtol=RTOL, atol=ATOL, err_msg=v.name)


def sanitize(name):
    """An output name as the executable writes its file name."""
    return ''.join(c if c.isascii() and (c.isalnum() or c in '_.-') else '_' for c in name)


#: Where make_folder keeps the kernel objects of emitted Makefiles for the
#: whole run (tests/conftest.py sets it; unset, nothing is shared).
OBJECT_CACHE = 'CHAINER_COMPILER_TEST_OBJECTS'
#: A kernel's compile line in `make -n`'s plan (render's Makefile rules).
_KERNEL_COMPILE = re.compile(r' -c -o (ccn_\w+\.o) (ccn_\w+\.c)$')


def _shared_kernel_objects(folder, args):
    """Put the kernel objects (ccn_*.o) that `make -C folder *args` would
    compile into ``folder``, newer than their sources so make keeps them:
    each is compiled by the Makefile's own command line, once per run for
    that line and the same kernel source and ccn_*.h headers (what the
    object is made of), and copied from the run's cache after that.
    Returns what those compiles printed (their command lines and
    diagnostics), as make would have; a compile that fails is left to make,
    which reports it."""
    cache = os.environ.get(OBJECT_CACHE)
    if not cache:
        return ''
    os.makedirs(cache, exist_ok=True)
    plan = subprocess.run(['make', '-n', '-C', str(folder)] + list(args), capture_output=True,
                          text=True, timeout=60).stdout
    common = b''.join(pathlib.Path(p).name.encode() + pathlib.Path(p).read_bytes()
                      for p in sorted(glob.glob(os.path.join(folder, 'ccn_*.h'))))
    printed = []
    for line in plan.splitlines():
        match = _KERNEL_COMPILE.search(line)
        if match is None:
            continue
        target, source = match.groups()
        code = pathlib.Path(folder, source).read_bytes()
        key = hashlib.sha256(line.encode() + b'\0' + code + b'\0' + common).hexdigest()
        entry = os.path.join(cache, key)
        if not os.path.exists(entry + '.o'):
            done = subprocess.run(shlex.split(line), cwd=folder, capture_output=True, text=True,
                                  timeout=300)
            if done.returncode != 0:
                break
            # Output first: an object in the cache always has its output.
            for suffix, data in (('.txt', (done.stdout + done.stderr).encode()),
                                 ('.o', pathlib.Path(folder, target).read_bytes())):
                with tempfile.NamedTemporaryFile(dir=cache, delete=False) as f:
                    f.write(data)
                os.replace(f.name, entry + suffix)
        shutil.copyfile(entry + '.o', os.path.join(folder, target))
        with open(entry + '.txt') as f:
            printed.append(line + '\n' + f.read())
    return ''.join(printed)


def make_folder(folder, *args):
    """`make -C folder *args`, asserted to succeed; returns its output.  The
    kernels are compiled once per run (_shared_kernel_objects): model
    tests would otherwise compile the same kernel files in every build."""
    printed = _shared_kernel_objects(folder, args)
    done = subprocess.run(['make', '-C', str(folder)] + list(args), capture_output=True,
                          text=True, timeout=300)
    output = printed + done.stdout + done.stderr
    assert done.returncode == 0, output
    return output
