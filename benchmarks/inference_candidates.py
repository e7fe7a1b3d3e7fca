"""Inference on one exported ONNX file: this project's VM and native backend
against onnxruntime, and the native backend's emitted C built into a program
of its own (the Python-free deployment), which times itself."""
import multiprocessing
import os
import re
import signal
import subprocess
from dataclasses import dataclass
from typing import NamedTuple

import numpy
import onnxruntime
from timing import repetitions, timed

from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import emit_c

#: The line ``MODEL --iterations N`` prints (runtime/native/kernels/main.c.in).
ITERATIONS_LINE = re.compile(
    r'(\d+) iterations: mean ([0-9.]+) ms, median ([0-9.]+) ms, best ([0-9.]+) ms')


class Iterations(NamedTuple):
    """What one ``--iterations`` run of the executable printed."""
    runs: int
    mean_ms: float
    median_ms: float
    best_ms: float


def _first_input_call(executor, x):
    name = executor.program.inputs[0].name
    return lambda: executor.run({name: x})


def vm_inference(program, x):
    return _first_input_call(Executor(program, backend='numpy'), x)


def native_inference(program, x):
    """The Program compiled to C and called in-process; raises
    RuntimeVMError when it cannot be emitted or built."""
    return _first_input_call(Executor(program, backend='native'), x)


def onnxruntime_inference(onnx_file, x):
    session = onnxruntime.InferenceSession(onnx_file, providers=['CPUExecutionProvider'])
    name = session.get_inputs()[0].name
    return lambda: session.run(None, {name: x})


def first_output(call):
    """The first output of one call of an inference callable (the Executor
    returns a dict, onnxruntime a list)."""
    outputs = call()
    return numpy.asarray(next(iter(outputs.values())) if isinstance(outputs, dict)
                         else outputs[0])


def same_outputs(reference, candidate):
    """Two first outputs agree (the comparison is fair)."""
    return bool(numpy.allclose(candidate, reference, rtol=1e-3, atol=1e-4))


def vm_peak_bytes(program, x):
    """(most bytes held by live registers in one VM run, constants
    included; the constants' bytes), to set beside the native arena, which
    holds neither weights nor inputs and outputs."""
    executor = Executor(program, backend='numpy', track_memory=True)
    _first_input_call(executor, x)()
    return executor.peak_bytes, sum(numpy.asarray(v).nbytes for v in program.constants.values())


#: How the executable is built: weights in model_weights.bin (C literals
#: of ResNet-50's 25M weights take minutes to compile), and tuned for this
#: CPU as the in-Python library is (the emitted Makefile's default is
#: portable code).
WEIGHTS = 'file'
MAKE_VARIABLES = ('ARCH=-march=native',)


@dataclass
class NativeBuild:
    """What building the emitted C got to: emit and compile seconds, the
    arena's bytes and the executable's path, each None until reached;
    ``failure`` says why it stopped, ``timed_out`` whether it ran out of time."""
    directory: str
    emit_s: float | None = None
    compile_s: float | None = None
    arena_bytes: int | None = None
    executable: str | None = None
    failure: str | None = None
    timed_out: bool = False


def _emit_child(program, directory, results):
    try:
        emitted, seconds = timed(lambda: emit_c(program, directory, weights=WEIGHTS))
        results.put((seconds, emitted.arena_bytes, None))
    except Exception as e:  # reported to the parent, which names it
        # One line: it goes into a markdown table (a refusal lists every op).
        results.put((None, None, ' '.join(('%s: %s' % (type(e).__name__, e)).split())))


def _emit(program, build, timeout_s):
    """emit_c in a child process, so that an emit that takes too long can be
    stopped."""
    # fork: the child has the Program without pickling it (ResNet-50's is
    # 100 MB) or importing the main module again, and runs only emit_c.
    context = multiprocessing.get_context('fork')
    results = context.Queue()
    child = context.Process(target=_emit_child, args=(program, build.directory, results))
    child.start()
    child.join(timeout_s)
    if child.is_alive():
        child.kill()
        child.join()
        build.failure, build.timed_out = 'emit_c took over %g s (stopped)' % timeout_s, True
        return
    if results.empty():
        build.failure = 'emit_c died (exit status %s)' % child.exitcode
        return
    build.emit_s, build.arena_bytes, build.failure = results.get()


def _make(directory, timeout_s, make_variables=MAKE_VARIABLES):
    """(exit status, stderr) of ``make -C directory make_variables``; None
    when it ran past ``timeout_s``, and then the whole build (its compilers
    too) is stopped."""
    with subprocess.Popen(['make', '-s', '-C', directory] + list(make_variables),
                          stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as make:
        try:
            _, stderr = make.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGKILL)  # its own session: make and its cc1s only
            make.communicate()
            return None
    return make.returncode, stderr


def _compile(build, timeout_s, make_variables=MAKE_VARIABLES):
    """``make -C DIRECTORY make_variables``."""
    done, seconds = timed(lambda: _make(build.directory, timeout_s, make_variables))
    if done is None:
        build.failure, build.timed_out = 'make took over %g s (stopped)' % timeout_s, True
        return
    status, stderr = done
    if status != 0:
        errors = [line for line in stderr.splitlines() if 'error' in line]
        build.failure = 'make failed: %s' % (errors or stderr.splitlines() or ['?'])[0]
        return
    build.compile_s, build.executable = seconds, os.path.join(build.directory, 'model')


def build_executable(program, directory, timeout_s, make_variables=MAKE_VARIABLES):
    """Emit ``program`` as C into ``directory`` and build it with its
    Makefile and ``make_variables`` (() for the Makefile's defaults), each
    step stopped after ``timeout_s`` seconds.  Never raises for a Program
    the native backend refuses: NativeBuild says how far it got."""
    build = NativeBuild(directory)
    _emit(program, build, timeout_s)
    if build.failure is None:
        _compile(build, timeout_s, make_variables)
    return build


def parse_iterations(stdout):
    """The Iterations of the executable's ``--iterations`` output;
    ValueError when the line is missing."""
    found = ITERATIONS_LINE.search(stdout)
    if found is None:
        raise ValueError('no "N iterations: mean X ms, median M ms, best Y ms" line in %r'
                         % stdout[-200:])
    return Iterations(int(found.group(1)), *(float(found.group(k)) for k in (2, 3, 4)))


class ExecutableRuns:
    """The built executable on ``inputs`` (one array per graph input, in
    graph-input order, saved once beside it): ``run(n)`` times n runs in one
    process, ``first_output()`` is the first output the last run wrote."""

    def __init__(self, build, program, inputs, timeout_s):
        if len(inputs) != len(program.inputs):
            raise ValueError('%d inputs for the executable, whose graph has %d'
                             % (len(inputs), len(program.inputs)))
        self._build, self._program, self._timeout_s = build, program, timeout_s
        self._input_files = []
        for k, x in enumerate(inputs):
            self._input_files.append(os.path.join(build.directory, 'in_%d.npy' % k))
            numpy.save(self._input_files[-1], x)
        self._out_dir = os.path.join(build.directory, 'out')

    def run(self, iterations):
        done = subprocess.run([self._build.executable, '--iterations', str(iterations),
                               '-o', self._out_dir, *self._input_files], capture_output=True,
                              text=True, timeout=self._timeout_s, check=True)
        return parse_iterations(done.stdout)

    def first_output(self):
        # main.c names output files after the output, other characters as '_'.
        name = re.sub(r'[^A-Za-z0-9_.-]', '_', self._program.outputs[0].name)
        return numpy.load(os.path.join(self._out_dir, name + '.npy'))


def executable_timing(build, program, inputs, budget_s, timeout_s):
    """(Iterations, first output) of the built executable timing itself
    on ``inputs`` (ExecutableRuns): a short run estimates the time per
    call, the second's count fills ``budget_s`` like
    timing.time_interleaved."""
    runs = ExecutableRuns(build, program, inputs, timeout_s)
    estimate = runs.run(3)
    timing = runs.run(repetitions(budget_s, estimate.mean_ms / 1e3))
    return timing, runs.first_output()
