"""Issue 35's GPU checks in one run: the CuPy backend against NumPy on one machine.

Stages (each in its own try, under its own time limit, results written to
``--out`` as they come):

  A env        nvidia-smi, versions, the device, free memory, cuDNN
  B pytest     the runtime's tests with CHAINER_COMPILER_TEST_BACKEND=cupy
  C conformance ONNX's node tests on cupy and on numpy (same onnx), the differences
  D fixtures   Programs saved on the CPU machine (make_fixtures.py) replayed on cupy
  E memory     the VM's own pool, the shared and the unified-memory allocators
  F speed      ResNet-50 inference (batch 1, 32) and training step (batch 32)
               against PyTorch eager (and onnxruntime's CUDA provider), a profile

B and C run as subprocesses while A, D and E run; F runs alone afterwards so
that its timings share the GPU with nothing.  ``--dry-run`` runs every stage
small on NumPy (the CPU check of this script itself).

    python3 benchmarks/gpu/run_gpu_checks.py --out $OUT --budget-seconds 480
    python3 benchmarks/gpu/run_gpu_checks.py --out /tmp/gpu --dry-run
"""
import argparse
import contextlib
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ccshim  # noqa: E402

ccshim.install()
import numpy  # noqa: E402

ROOT = ccshim.ROOT
FIXTURES = os.path.join(ROOT, 'result', 'gpu_fixtures')
RESERVE_S = 10  # kept for the summary at the end


class StageTimeout(Exception):
    """A stage ran past its time budget (time_limit)."""


@contextlib.contextmanager
def time_limit(seconds):
    """Raise StageTimeout in this (main) thread after ``seconds``."""
    def expire(signum, frame):
        raise StageTimeout('over its %d s budget' % seconds)
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(max(1, int(seconds)))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class Report:
    """gpu_results.json and gpu_log.txt under ``out``, rewritten as results come."""

    def __init__(self, out, budget):
        self.out = out
        os.makedirs(out, exist_ok=True)
        self.start = time.time()
        self.deadline = self.start + budget
        self.results = {'budget_s': budget, 'stages': {}}
        self._log = open(os.path.join(out, 'gpu_log.txt'), 'a')

    def remaining(self):
        return self.deadline - time.time()

    def log(self, text):
        line = '[%6.1fs] %s' % (time.time() - self.start, text)
        print(line, flush=True)
        self._log.write(line + '\n')
        self._log.flush()

    def save(self):
        path = os.path.join(self.out, 'gpu_results.json')
        with open(path + '.tmp', 'w') as f:
            json.dump(self.results, f, indent=1, default=str)
        os.replace(path + '.tmp', path)

    def write(self, name, text):
        with open(os.path.join(self.out, name), 'w') as f:
            f.write(text)

    def stage(self, name, budget, fn, *args):
        """Run ``fn(*args)`` (returning a dict) within ``budget`` seconds
        and what is left; record its status, time and results."""
        budget = min(budget, self.remaining() - RESERVE_S)
        entry = self.results['stages'].setdefault(name, {})
        if budget < 3:
            entry['status'] = 'skipped: no time left'
            self.log('%s: skipped, no time left' % name)
            self.save()
            return entry
        self.log('%s: start (budget %d s)' % (name, budget))
        start = time.time()
        try:
            with time_limit(budget):
                entry.update(fn(entry, *args) or {})
            entry['status'] = entry.get('status', 'ok')
        except StageTimeout as e:
            entry['status'] = 'timeout: %s' % e
        except Exception as e:  # one stage's failure must not stop the others
            entry['status'] = 'error: %s: %s' % (type(e).__name__, str(e)[:500])
            entry['traceback'] = traceback.format_exc()[-3000:]
        entry['seconds'] = round(time.time() - start, 1)
        self.log('%s: %s (%.1f s)' % (name, entry['status'].split('\n')[0][:200],
                                      entry['seconds']))
        self.save()
        return entry


# -- the array module -------------------------------------------------------

class Device:
    """The backend under test and how to wait for it."""

    def __init__(self, backend):
        self.backend = backend
        if backend == 'cupy':
            import cupy
            self.cupy = cupy
            self.xp = cupy
        else:
            self.cupy = None
            self.xp = numpy

    def sync(self):
        if self.cupy is not None:
            self.cupy.cuda.Device().synchronize()

    def put(self, value):
        if isinstance(value, numpy.ndarray):
            return self.xp.asarray(value.copy())
        return value

    def get(self, value):
        from chainer_compiler.runtime.backend import to_numpy
        return to_numpy(value)


def timed(fn, sync, warmup, repeat, deadline=None):
    """Median and best seconds of ``repeat`` calls after ``warmup`` ones,
    each ended by ``sync``; stops early at ``deadline`` (time.time())."""
    for _ in range(warmup):
        fn()
        sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
        if deadline and time.time() > deadline and len(times) >= 3:
            break
    return {'median_ms': round(statistics.median(times) * 1e3, 3),
            'best_ms': round(min(times) * 1e3, 3), 'runs': len(times)}


def max_difference(expected, actual):
    expected = numpy.asarray(expected, dtype=numpy.float64)
    actual = numpy.asarray(actual, dtype=numpy.float64)
    if expected.shape != actual.shape:
        return float('inf')
    if expected.size == 0:
        return 0.0
    return float(numpy.max(numpy.abs(expected - actual)))


# -- A: environment -----------------------------------------------------------

def stage_env(entry, device):
    info = {'python': sys.version.split()[0], 'numpy': numpy.__version__,
            'executable': sys.executable}
    for name in ('onnx', 'onnxruntime', 'torch', 'torchvision', 'cupy', 'chainer',
                 'pytest_timeout', 'hypothesis', 'onnxscript'):
        try:
            module = __import__(name)
            info[name] = getattr(module, '__version__', 'present')
        except Exception as e:
            info[name] = 'unavailable: %s: %s' % (type(e).__name__, str(e).split('\n')[0][:200])
    try:
        import onnxruntime
        info['onnxruntime_providers'] = onnxruntime.get_available_providers()
    except Exception as e:
        info['onnxruntime_providers'] = 'unavailable: %s' % e
    try:
        import torch
        info['torch_cuda'] = torch.cuda.is_available()
        info['torch_cudnn'] = torch.backends.cudnn.version()
    except Exception as e:
        info['torch_cuda'] = 'unavailable: %s' % e
    from chainer_compiler.conformance import node_tests_dir
    node_dir = node_tests_dir()
    info['onnx_node_tests'] = len(os.listdir(node_dir)) if os.path.isdir(node_dir) else 0
    try:
        smi = subprocess.run(['nvidia-smi'], capture_output=True, text=True, timeout=20)
        info['nvidia_smi'] = smi.stdout.splitlines()[:20]
    except Exception as e:
        info['nvidia_smi'] = 'unavailable: %s' % e
    from chainer_compiler.runtime.backend import cupy_unavailable_reason
    info['cupy_unavailable_reason'] = cupy_unavailable_reason()
    if device.cupy is not None:
        cupy = device.cupy
        props = cupy.cuda.runtime.getDeviceProperties(0)
        free, total = cupy.cuda.runtime.memGetInfo()
        info.update(device_name=props['name'].decode() if isinstance(props['name'], bytes)
                    else props['name'], compute_capability='%d.%d' % (props['major'],
                                                                     props['minor']),
                    memory_free_gib=round(free / 2**30, 2),
                    memory_total_gib=round(total / 2**30, 2),
                    cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(),
                    cuda_driver=cupy.cuda.runtime.driverGetVersion(),
                    cupy_has_cudnn=hasattr(cupy, 'cudnn'))
        try:
            import cudnn  # cuDNN frontend: what CuPy 14 points to instead of cupy.cudnn
            info['cudnn_frontend'] = getattr(cudnn, '__version__', 'present')
        except Exception as e:
            info['cudnn_frontend'] = 'unavailable: %s' % e
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            cupy.show_config()
        info['cupy_config'] = buffer.getvalue().splitlines()[:40]
    return info


# -- B and C: subprocesses ----------------------------------------------------

def _subprocess_env(test_backend=None):
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        [os.path.join(HERE, 'site'), ROOT] + ([env['PYTHONPATH']] if env.get('PYTHONPATH')
                                              else []))
    env['PYTHONUNBUFFERED'] = '1'
    if test_backend:
        env['CHAINER_COMPILER_TEST_BACKEND'] = test_backend
    return env


def start_pytest(out, backend, dry_run):
    # -v: one line per test, so a run cut short at the deadline still tells.
    args = [sys.executable, '-m', 'pytest', '-v', '--tb=line', '-rfEs', '-p', 'no:cacheprovider',
            '--continue-on-collection-errors']
    try:
        import pytest_timeout  # noqa: F401
        args += ['--timeout', '120']
    except ImportError:  # without pytest-timeout, the stage's own budget bounds the run
        pass
    if dry_run:
        args += ['tests/runtime/ops/test_training.py', 'tests/runtime/test_backend.py']
    else:
        args += ['tests/runtime', '--ignore', 'tests/runtime/native']
    log = open(os.path.join(out, 'pytest_%s.txt' % backend), 'w')
    log.write('$ %s\n' % ' '.join(args))
    log.flush()
    return subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env=_subprocess_env(backend), start_new_session=True)


def start_conformance(out, backend, jobs, pattern):
    args = [sys.executable, os.path.join(HERE, 'run_gpu_checks.py'), '--conformance-worker',
            backend, '--out', out, '--jobs', str(jobs)]
    if pattern:
        args += ['--pattern', pattern]
    log = open(os.path.join(out, 'conformance_%s.jsonl' % backend), 'w')
    return subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.DEVNULL,
                            env=_subprocess_env(), start_new_session=True)


def conformance_worker(backend, jobs, pattern):
    """Print one JSON line per node test as it finishes (so a run cut short
    still tells what it did), then a summary line."""
    from chainer_compiler.conformance import run_conformance

    def progress(result):
        print(json.dumps({'name': result.name, 'status': result.status,
                          'family': result.family, 'reason': result.reason.split('\n')[0]}),
              flush=True)
    start = time.time()
    run_conformance(pattern, backend=backend, progress=progress, jobs=jobs)
    print(json.dumps({'done_seconds': round(time.time() - start, 1)}), flush=True)
    return 0


def finish(process, deadline):
    """Wait for ``process`` until ``deadline``; kill its group after that."""
    try:
        process.wait(timeout=max(1, deadline - time.time()))
        return 'exit %d' % process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return 'killed at the deadline'


def pytest_summary(out, backend, how):
    with open(os.path.join(out, 'pytest_%s.txt' % backend)) as f:
        lines = f.read().splitlines()
    tail = [line for line in lines[-400:] if line.startswith(('FAILED', 'ERROR'))]
    last = next((line for line in reversed(lines) if ' in ' in line and (
        'passed' in line or 'failed' in line or 'error' in line)), '')
    counts = {word: sum(1 for line in lines if ' %s' % word in line and '::' in line)
              for word in ('PASSED', 'FAILED', 'ERROR', 'SKIPPED', 'XFAIL')}
    return {'process': how, 'summary': last.strip('= ') or 'cut short: %s' % counts,
            'counted_lines': counts, 'failures': tail[:200]}


def read_conformance(out, backend):
    results, done = {}, None
    path = os.path.join(out, 'conformance_%s.jsonl' % backend)
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if 'name' in record:
                results[record['name']] = record
            elif 'done_seconds' in record:
                done = record['done_seconds']
    return results, done


def conformance_report(report, cupy_how, numpy_how, backend):
    entry = {}
    runs = {}
    for name, how in (('numpy', numpy_how), (backend, cupy_how)):
        results, done = read_conformance(report.out, name)
        counts = {}
        for r in results.values():
            counts[r['status']] = counts.get(r['status'], 0) + 1
        runs[name] = results
        entry[name] = {'process': how, 'finished_in_s': done, 'ran': len(results), **counts}
    if backend == 'numpy':
        return entry
    both = sorted(set(runs['numpy']) & set(runs[backend]))
    differences = [(n, runs['numpy'][n], runs[backend][n]) for n in both
                   if runs['numpy'][n]['status'] != runs[backend][n]['status']]
    entry['compared'] = len(both)
    entry['passed_on_both_compared'] = {
        b: sum(runs[b][n]['status'] == 'passed' for n in both) for b in ('numpy', backend)}
    entry['differences'] = len(differences)
    lines = ['# ONNX node conformance: numpy vs %s on the same machine' % backend, '',
             json.dumps({k: v for k, v in entry.items() if k != 'differences_list'}), '',
             '# %d tests whose status differs (test, numpy -> %s, family, reason on %s)'
             % (len(differences), backend, backend)]
    for name, a, b in differences:
        lines.append('%s\t%s -> %s\t%s\t%s' % (name, a['status'], b['status'], b['family'],
                                               b['reason'] or a['reason']))
    failed_cupy = sorted(n for n in runs[backend] if runs[backend][n]['status'] == 'failed')
    lines += ['', '# every failure on %s (%d)' % (backend, len(failed_cupy))]
    lines += ['%s\t%s' % (n, runs[backend][n]['reason']) for n in failed_cupy]
    report.write('conformance.txt', '\n'.join(lines) + '\n')
    return entry


# -- D: fixtures ------------------------------------------------------------

def _fixture_inputs(data, kinds):
    values = []
    for i, kind in enumerate(kinds):
        if kind == 'none':
            values.append(None)
        elif kind == 'scalar':
            arr = data['in%d' % i]
            values.append(arr.dtype.type(arr))  # as TrainingStep feeds hyperparameters
        else:
            values.append(data['in%d' % i].copy())
    return values


def stage_fixtures(entry, device, folder, rtol=1e-4, atol=1e-5):
    from chainer_compiler.runtime.executor import Executor
    from chainer_compiler.runtime.serialization import load_program
    with open(os.path.join(folder, 'manifest.json')) as f:
        manifest = json.load(f)
    checks = {}
    for item in manifest:
        name = item['name']
        data = numpy.load(os.path.join(folder, name + '.npz'))
        program = load_program(os.path.join(folder, name + '.program'))
        outs_saved = [data['out%d' % i] for i, k in enumerate(item['output_kinds'])
                      if k != 'none']
        reference_inputs = _fixture_inputs(data, item['input_kinds'])
        reference = Executor(program, backend='numpy').run_positional(reference_inputs)
        check = {'program': item['program'], 'instructions': item['instructions'],
                 'numpy2_vs_saved_max_diff': max(
                     (max_difference(a, b) for a, b in zip(outs_saved, reference)),
                     default=0.0)}
        variants = [('host_hyperparameters', False)]
        if 'scalar' in item['input_kinds']:
            variants.append(('device_0d_hyperparameters', True))
        for label, scalars_on_device in variants:
            values = [device.put(v) for v in _fixture_inputs(data, item['input_kinds'])]
            if scalars_on_device:
                values = [device.xp.asarray(v) if isinstance(v, numpy.generic) else v
                          for v in values]
            outputs = Executor(program, backend=device.backend).run_positional(values)
            device.sync()
            out_diff = max((max_difference(a, device.get(b))
                            for a, b in zip(reference, outputs)), default=0.0)
            # In-place updates: the inputs after the run against NumPy's.
            state_diff = max((max_difference(a, device.get(b))
                              for a, b in zip(reference_inputs, values)
                              if isinstance(a, numpy.ndarray)), default=0.0)
            ok = all(numpy.allclose(numpy.asarray(a), numpy.asarray(device.get(b)),
                                    rtol=rtol, atol=atol)
                     for a, b in zip(list(reference) + [v for v in reference_inputs
                                                        if isinstance(v, numpy.ndarray)],
                                     list(outputs) + [v for v, r in zip(values,
                                                                        reference_inputs)
                                                      if isinstance(r, numpy.ndarray)]))
            check[label] = {'equal_to_numpy': ok, 'outputs_max_diff': out_diff,
                            'updated_inputs_max_diff': state_diff}
        checks[name] = check
    all_ok = all(c[k]['equal_to_numpy'] for c in checks.values() for k in c
                 if isinstance(c[k], dict))
    return {'all_equal_to_numpy': all_ok, 'rtol': rtol, 'atol': atol, 'programs': checks}


# -- E: memory --------------------------------------------------------------

def stage_memory(entry, device, folder):
    from chainer_compiler import allocators
    from chainer_compiler.runtime import backend
    from chainer_compiler.runtime.executor import Executor
    from chainer_compiler.runtime.serialization import load_program
    with open(os.path.join(folder, 'manifest.json')) as f:
        item = next(i for i in json.load(f) if i['program'] == 'training_step')
    data = numpy.load(os.path.join(folder, item['name'] + '.npz'))
    program = load_program(os.path.join(folder, item['name'] + '.program'))

    def inputs():  # the caller's arrays: from the default pool, as Chainer's are
        return [device.put(v) for v in _fixture_inputs(data, item['input_kinds'])]

    def run(values, track=False):
        executor = Executor(program, backend=device.backend, track_memory=track)
        outputs = executor.run_positional(values)
        device.sync()
        return executor, outputs
    result = {'program': item['name'], 'vm_peak_bytes': run(inputs(), True)[0].peak_bytes}
    if device.cupy is None:
        result['note'] = 'numpy: no device pools to report'
        return result
    cupy = device.cupy
    default_pool = cupy.get_default_memory_pool()
    backend.set_cupy_pool(None)
    pool = backend.cupy_pool()
    values = inputs()
    before = default_pool.used_bytes()
    executor, outputs = run(values)
    result['own_pool'] = {
        'vm_pool_is_cupy_default': pool is default_pool,
        'vm_pool_total_bytes': pool.total_bytes(),
        'vm_pool_used_bytes_with_outputs_alive': pool.used_bytes(),
        # Constants and every intermediate in the VM's pool: 0 expected.
        'default_pool_used_bytes_change_during_executor_and_run':
            default_pool.used_bytes() - before}
    del executor, outputs, values
    # Shared: "Chainer" (here plain CuPy arrays from the default allocator,
    # which is what Chainer uses) and the VM draw from one pool.
    allocators.use_chainerx_shared_allocator()
    try:
        shared = backend.cupy_pool()
        values = inputs()
        chainer_like = cupy.ones((1 << 20,), cupy.float32)  # 4 MiB, default allocator
        used_before_vm = shared.used_bytes()
        executor, outputs = run(values)
        result['shared_pool'] = {
            'vm_pool_is_cupy_default': shared is default_pool,
            'used_bytes_before_vm': used_before_vm,
            'used_bytes_with_vm_outputs_alive': shared.used_bytes(),
            'vm_peak_bytes_tracked': run(inputs(), True)[0].peak_bytes,
            'total_bytes': shared.total_bytes()}
        del chainer_like, executor, outputs, values
    finally:
        backend.set_cupy_pool(None)
    result['unified'] = _check_unified(cupy, allocators, backend)
    return result


def _check_unified(cupy, allocators, backend):
    """use_unified_memory_allocator(): a request above the card's free
    memory is refused before any managed memory is asked for; a small one is
    managed memory.  The default allocator is put back afterwards."""
    out = {}
    guard = getattr(allocators, 'managed_malloc_within_free_memory', None)
    if guard is None:
        return {'skipped': 'this checkout has no free-memory guard: not asking for managed '
                           'memory above free (it can hang the GPU)'}
    free, total = cupy.cuda.runtime.memGetInfo()
    malloc = guard(cupy)
    try:
        malloc(free + (1 << 30))
        out['request_above_free'] = 'NOT refused (bug)'
    except cupy.cuda.memory.OutOfMemoryError as e:
        out['request_above_free'] = 'refused: %s' % str(e)[:200]
    try:
        allocators.use_unified_memory_allocator()
        a = cupy.ones((1 << 18,), cupy.float32)
        attributes = cupy.cuda.runtime.pointerGetAttributes(a.data.ptr)
        out['small_array_memory_type'] = int(attributes.type)  # 3: cudaMemoryTypeManaged
        out['small_array_is_managed'] = int(attributes.type) == 3
        out['vm_pool_allocator_is_managed'] = backend.cupy_pool() is not \
            cupy.get_default_memory_pool()
        del a
    finally:
        cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
        backend.set_cupy_pool(None)
    out['free_gib'] = round(free / 2**30, 2)
    return out


# -- F: speed -----------------------------------------------------------------

def export_resnet(model, batch, path, preserve=False):
    """torch.onnx.export of ``model`` at ``batch`` (TorchScript exporter,
    opset 17).  ``preserve``: keep BatchNormalization (not fused into Conv)
    for the training step."""
    import torch
    x = torch.randn(batch, 3, 224, 224)
    kwargs = dict(opset_version=17, input_names=['x'], output_names=['y'])
    if preserve:
        kwargs.update(training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    try:
        torch.onnx.export(model, (x,), path, dynamo=False, **kwargs)
        return 'torchscript'
    except Exception:  # a torch without the TorchScript exporter: the dynamo one
        kwargs.pop('training', None)
        kwargs.pop('do_constant_folding', None)
        torch.onnx.export(model, (x,), path, dynamo=True, external_data=False, **kwargs)
        return 'dynamo'


def tiny_resnet(batch, path):
    """A ResNet-shaped ONNX model (Conv, BatchNormalization, Relu, MaxPool,
    Add, GlobalAveragePool, Flatten, Gemm) for the dry run without torch."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = numpy.random.default_rng(0)
    inits, nodes = [], []

    def param(name, *shape, scale=0.1):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(numpy.float32), name))
        return name

    def conv_bn(x, name, cin, cout, relu=True):
        nodes.append(helper.make_node('Conv', [x, param(name + '.w', cout, cin, 3, 3)],
                                      [name + '.c'], pads=[1, 1, 1, 1]))
        stats = [param(name + '.g', cout), param(name + '.b', cout),
                 param(name + '.m', cout), name + '.v']
        inits.append(numpy_helper.from_array(numpy.ones(cout, numpy.float32), name + '.v'))
        nodes.append(helper.make_node('BatchNormalization', [name + '.c'] + stats,
                                      [name + '.n']))
        if not relu:
            return name + '.n'
        nodes.append(helper.make_node('Relu', [name + '.n'], [name + '.r']))
        return name + '.r'
    h = conv_bn('x', 'stem', 3, 8)
    nodes.append(helper.make_node('MaxPool', [h], ['pool'], kernel_shape=[2, 2], strides=[2, 2]))
    b = conv_bn(conv_bn('pool', 'b1', 8, 8), 'b2', 8, 8, relu=False)
    nodes.append(helper.make_node('Add', [b, 'pool'], ['sum']))
    nodes.append(helper.make_node('Relu', ['sum'], ['act']))
    nodes.append(helper.make_node('GlobalAveragePool', ['act'], ['gap']))
    nodes.append(helper.make_node('Flatten', ['gap'], ['flat']))
    nodes.append(helper.make_node('Gemm', ['flat', param('fc.w', 10, 8), param('fc.b', 10)],
                                  ['y'], transB=1))
    graph = helper.make_graph(nodes, 'tiny_resnet',
                              [helper.make_tensor_value_info('x', TensorProto.FLOAT,
                                                             [batch, 3, 32, 32])],
                              [helper.make_tensor_value_info('y', TensorProto.FLOAT,
                                                             [batch, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def training_step_program(path, lr_name='optimizer/lr'):
    """The training step of an ONNX classifier without Chainer: softmax
    cross entropy on its output, BatchNormalization in training mode, SGD on
    every float parameter.  Returns (program, parameter names, state names)."""
    from onnx import TensorProto, helper, numpy_helper

    from chainer_compiler.frontend import load_onnx
    from chainer_compiler.passes.training_mode import to_training_mode
    from chainer_compiler.training import OptimizerUpdate, compile_step_program
    proto = load_onnx(path, check=False)
    graph = proto.graph
    logits = graph.output[0]
    batch = logits.type.tensor_type.shape.dim[0].dim_value
    graph.input.append(helper.make_tensor_value_info('label', TensorProto.INT64, [batch]))
    graph.node.append(helper.make_node('SoftmaxCrossEntropyLoss', [logits.name, 'label'],
                                       ['loss'], reduction='mean'))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info('loss', TensorProto.FLOAT, []))
    stats = {n for node in graph.node if node.op_type == 'BatchNormalization'
             for n in node.input[3:5]}
    floats = [t.name for t in graph.initializer
              if numpy_helper.to_array(t).dtype.kind == 'f' and t.dims]
    params = [n for n in floats if n not in stats]
    states = [n for n in floats if n in stats]
    to_training_mode(proto)
    compiled = compile_step_program(proto, loss='loss', params=params + states, wrt=params,
                                    update=OptimizerUpdate('SGDUpdate', (), ('lr',)),
                                    check=False)
    initial = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    return compiled.program, initial


def stage_speed(entry, device, report, dry_run):
    """Fills ``entry`` as it goes (a timeout keeps what was measured)."""
    from chainer_compiler.pipeline import build_program
    from chainer_compiler.runtime.executor import Executor
    try:
        import torch
        import torchvision
        has_torch = torch.cuda.is_available() and not dry_run
    except Exception as e:
        has_torch, entry['torch'] = False, 'unavailable: %s' % e
    work = tempfile.mkdtemp(prefix='gpu_checks_')
    batches = (32, 1)
    if has_torch:
        torch.backends.cudnn.allow_tf32 = False  # fp32 on both sides
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.manual_seed(0)
        model = torchvision.models.resnet50(weights=None).eval()
        entry['model'] = 'torchvision resnet50 fp32, TF32 off in torch'
    else:
        model = None
        entry['model'] = 'tiny ResNet-shaped ONNX model (dry run / no torch CUDA)'
    repeat = 3 if dry_run else 20
    rng = numpy.random.default_rng(0)
    profiles = []  # the lines of profile.txt

    def export(batch, preserve=False):
        path = os.path.join(work, 'resnet_b%d%s.onnx' % (batch, '_train' if preserve else ''))
        start = time.time()
        if has_torch:
            entry['exporter'] = export_resnet(model, batch, path, preserve)
        else:
            tiny_resnet(batch, path)
        return path, round(time.time() - start, 1)

    def inference(batch):
        result = entry.setdefault('inference_b%d' % batch, {})
        path, result['export_s'] = export(batch)
        shape = (batch, 3, 224, 224) if has_torch else (batch, 3, 32, 32)
        x = rng.standard_normal(shape).astype(numpy.float32)
        start = time.time()
        program = build_program(path)
        result['compile_s'] = round(time.time() - start, 1)
        result['instructions'] = len(program.instructions)
        executor = Executor(program, backend=device.backend)
        xd = device.put(x)
        start = time.time()
        y = executor.run_positional([xd])[0]
        device.sync()
        result['first_run_s'] = round(time.time() - start, 2)
        deadline = time.time() + 30
        result['vm'] = timed(lambda: executor.run_positional([xd]), device.sync, 2, repeat,
                             deadline)
        result['vm_cuda_graph'] = _graph_replay(device, executor, [xd], repeat)
        # Host time to issue the run without waiting for the device: close
        # to the synchronized time means the VM is host-bound.
        result['vm_launch_only'] = timed(lambda: executor.run_positional([xd]), lambda: None,
                                         1, min(repeat, 10), deadline)
        device.sync()
        if has_torch:
            cuda_model = model.cuda()
            xt = torch.from_numpy(x).cuda()
            with torch.no_grad():
                yt = cuda_model(xt).cpu().numpy()
                result['torch_eager'] = timed(lambda: cuda_model(xt), torch.cuda.synchronize,
                                              3, repeat, time.time() + 30)
            result['max_diff_vs_torch'] = max_difference(yt, device.get(y))
            result['ratio_vm_over_torch'] = round(
                result['vm']['median_ms'] / result['torch_eager']['median_ms'], 2)
            model.cpu()
            result['onnxruntime'] = _onnxruntime(path, x, repeat)
        report.save()
        if batch == 32:
            lines, entry['profile_inference_b32'] = _profile(
                device, program, [xd], 'ResNet-50 inference, batch 32')
            profiles.extend(lines + [''])
            report.write('profile.txt', '\n'.join(profiles))

    def training(batch):
        result = entry.setdefault('training_b%d' % batch, {})
        path, result['export_s'] = export(batch, preserve=True)
        start = time.time()
        program, initial = training_step_program(path)
        result['compile_s'] = round(time.time() - start, 1)
        result['instructions'] = len(program.instructions)
        shape = (batch, 3, 224, 224) if has_torch else (batch, 3, 32, 32)
        x = rng.standard_normal(shape).astype(numpy.float32)
        label = rng.integers(0, 1000 if has_torch else 10, size=batch).astype(numpy.int64)
        feeds = {'x': x, 'label': label, 'optimizer/lr': numpy.float64(0.01)}
        feeds.update(initial)
        missing = [v.name for v in program.inputs if v.name not in feeds]
        if missing:
            raise RuntimeError('training step inputs without values: %s' % missing[:5])
        values = [device.put(feeds[v.name]) for v in program.inputs]
        executor = Executor(program, backend=device.backend)
        start = time.time()
        loss = float(device.get(executor.run_positional(values)[0]))
        device.sync()
        result['first_run_s'] = round(time.time() - start, 2)
        result['vm_first_loss'] = loss
        result['vm'] = timed(lambda: executor.run_positional(values), device.sync, 1,
                             max(3, repeat // 2), time.time() + 40)
        result['vm_cuda_graph'] = _graph_replay(device, executor, values, max(3, repeat // 2))
        if has_torch:
            cuda_model = model.cuda().train()
            optimizer = torch.optim.SGD(cuda_model.parameters(), lr=0.01)
            xt, lt = torch.from_numpy(x).cuda(), torch.from_numpy(label).cuda()

            def step():
                optimizer.zero_grad(set_to_none=True)
                out = torch.nn.functional.cross_entropy(cuda_model(xt), lt)
                out.backward()
                optimizer.step()
                return out
            # The first step starts from the exported weights, as the VM's did.
            result['torch_first_loss'] = float(step())
            result['torch_eager'] = timed(step, torch.cuda.synchronize, 2, max(3, repeat // 2),
                                          time.time() + 30)
            result['ratio_vm_over_torch'] = round(
                result['vm']['median_ms'] / result['torch_eager']['median_ms'], 2)
            model.cpu().eval()
        report.save()
        lines, entry['profile_training_b%d' % batch] = _profile(
            device, program, values, 'ResNet-50 training step (SGD), batch %d' % batch)
        profiles.extend(lines + [''] + _host_profile(
            lambda: (executor.run_positional(values), device.sync()), 3,
            'host time of 3 training steps, by Python function (cProfile)') + [''])
        report.write('profile.txt', '\n'.join(profiles))

    def conv_variants(batch):
        import kernel_variants
        entry['conv_variants'] = {'batch': batch, 'rows': kernel_variants.measure(
            device, timed, batch, repeat=10 if has_torch else 2,
            torch=torch if has_torch else None)}
        entry['batch_norm_variants'] = {'batch': batch, 'rows': kernel_variants.measure_batch_norm(
            device, timed, batch, repeat=10 if has_torch else 2)}

    for label, fn in (('inference_b32', lambda: inference(batches[0])),
                      ('training_b32', lambda: training(32 if has_torch else 8)),
                      ('inference_b1', lambda: inference(batches[1])),
                      ('conv_variants', lambda: conv_variants(32 if has_torch else 2))):
        left = report.remaining() - RESERVE_S
        if left < 15:
            entry[label] = {'status': 'skipped: no time left'}
            continue
        try:
            with time_limit(min(left, 150)):
                fn()
        except StageTimeout as e:
            entry.setdefault(label, {})['status'] = 'timeout: %s' % e
        except Exception as e:
            entry.setdefault(label, {})['status'] = 'error: %s: %s' % (type(e).__name__,
                                                                      str(e)[:400])
            entry[label]['traceback'] = traceback.format_exc()[-2000:]
        report.log('speed %s: %s' % (label, json.dumps(
            {k: v for k, v in entry.get(label, {}).items() if k != 'traceback'})[:600]))
        report.save()
    return {}


def _onnxruntime(path, x, repeat):
    import onnxruntime
    if 'CUDAExecutionProvider' not in onnxruntime.get_available_providers():
        return 'no CUDAExecutionProvider (providers: %s)' % onnxruntime.get_available_providers()
    session = onnxruntime.InferenceSession(path, providers=['CUDAExecutionProvider'])
    if session.get_providers()[0] != 'CUDAExecutionProvider':
        return 'CUDA provider did not load: %s' % session.get_providers()
    return timed(lambda: session.run(None, {'x': x}), lambda: None, 2, repeat,
                 time.time() + 20) | {'note': 'host arrays in and out'}


def _graph_replay(device, executor, values, repeat):
    """An experiment, not a feature: the run captured once as a CUDA graph
    (from a pool of its own, so no later allocation reuses its memory) and
    replayed, timed like the plain run.  Tells how much of the step is the
    host issuing kernels one by one."""
    if device.cupy is None:
        return 'needs CuPy'
    cupy = device.cupy
    try:
        pool = cupy.cuda.MemoryPool()
        stream = cupy.cuda.Stream(non_blocking=True)
        with cupy.cuda.using_allocator(pool.malloc), stream:
            stream.begin_capture()
            # The run without the VM's own pool; _run empties the list it gets.
            outputs = executor._run(list(values))
            graph = stream.end_capture()

        def replay():
            graph.launch(stream)
        replay()
        stream.synchronize()
        result = timed(replay, stream.synchronize, 1, repeat, time.time() + 20)
        del outputs
        return result
    except Exception as e:
        return 'capture failed: %s: %s' % (type(e).__name__, str(e)[:300])


def _host_profile(fn, times, title, rows=40):
    """Lines of cProfile's table (by own time) over ``times`` calls of ``fn``:
    where the host spends a step the device waits for."""
    import cProfile
    import pstats
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(times):
        fn()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats('tottime').print_stats(rows)
    return ['# ' + title] + text.getvalue().splitlines()


def _profile(device, program, values, title):
    """Per-operator device time of one run of ``program`` on ``values``, each
    instruction synchronized, next to the host time to issue it: the lines
    of a table, and its top rows."""
    from chainer_compiler.runtime.executor import Executor
    from chainer_compiler.runtime.profiling import Tracer

    class SyncTracer(Tracer):
        def __init__(self):
            super().__init__(keep_events=False)
            self.launch = {}

        def record(self, program_name, index, inst, inputs, outputs, start, end):
            device.sync()
            op = inst.qualified_op
            self.launch[op] = self.launch.get(op, 0.0) + (end - start)
            super().record(program_name, index, inst, inputs, outputs, start,
                           time.perf_counter())
    Executor(program, backend=device.backend, tracer=SyncTracer()).run_positional(
        values)  # warm-up: kernels compiled, pool filled
    tracer = SyncTracer()
    executor = Executor(program, backend=device.backend, tracer=tracer)
    start = time.perf_counter()
    executor.run_positional(values)
    device.sync()
    total = (time.perf_counter() - start) * 1e3
    rows = tracer.summary()
    lines = ['# per-operator time, %s on %s, every instruction synchronized (total %.2f ms)'
             % (title, device.backend, total),
             '%-32s %6s %10s %12s' % ('op', 'count', 'total ms', 'issue ms')]
    for op, count, ms in rows:
        lines.append('%-32s %6d %10.3f %12.3f' % (op, count, ms, tracer.launch[op] * 1e3))
    if device.cupy is not None:
        from chainer_compiler.runtime.backend import cupy_pool
        lines.append('vm pool: total %d bytes, used %d bytes, free blocks %d' % (
            cupy_pool().total_bytes(), cupy_pool().used_bytes(), cupy_pool().n_free_blocks()))
    return lines, {'synchronized_total_ms': round(total, 2),
                   'top': [(op, n, round(ms, 2)) for op, n, ms in rows[:10]]}


# -- main ---------------------------------------------------------------------

def summary(report):
    s = report.results['stages']
    lines = ['== GPU checks summary (%.0f s) ==' % (time.time() - report.start)]
    for name, entry in s.items():
        lines.append('%-12s %s (%s s)' % (name, str(entry.get('status', '?')).split('\n')[0][:150],
                                         entry.get('seconds', '?')))
    env = s.get('A_env', {})
    lines.append('device: %s  cupy %s  torch %s  onnxruntime providers %s' % (
        env.get('device_name'), env.get('cupy'), env.get('torch'),
        env.get('onnxruntime_providers')))
    b = s.get('B_pytest', {})
    lines.append('pytest: %s' % b.get('summary'))
    c = s.get('C_conformance', {})
    for backend in ('numpy', 'cupy'):
        if backend in c:
            lines.append('conformance %s: %s' % (backend, json.dumps(c[backend])))
    if 'differences' in c:
        lines.append('conformance differences: %s of %s compared' % (c['differences'],
                                                                     c.get('compared')))
    d = s.get('D_fixtures', {})
    lines.append('fixtures equal to numpy: %s' % d.get('all_equal_to_numpy'))
    f = s.get('F_speed', {})
    for key in ('inference_b1', 'inference_b32', 'training_b32', 'training_b8'):
        if key in f:
            r = f[key]
            graph = r.get('vm_cuda_graph')
            lines.append('%s: vm %s ms, torch %s ms, ratio %s, launch-only %s ms, '
                         'CUDA graph replay %s %s' % (
                             key, r.get('vm', {}).get('median_ms'),
                             r.get('torch_eager', {}).get('median_ms')
                             if isinstance(r.get('torch_eager'), dict) else None,
                             r.get('ratio_vm_over_torch'),
                             r.get('vm_launch_only', {}).get('median_ms'),
                             graph.get('median_ms') if isinstance(graph, dict) else graph,
                             r.get('status', '')))
    text = '\n'.join(lines)
    report.log(text)
    report.results['summary'] = lines
    report.save()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', required=True)
    parser.add_argument('--budget-seconds', type=float, default=480)
    parser.add_argument('--dry-run', action='store_true',
                        help='every stage small, on NumPy (the CPU check of this script)')
    parser.add_argument('--backend', choices=('cupy', 'numpy'), default=None)
    parser.add_argument('--fixtures', default=FIXTURES)
    parser.add_argument('--jobs', type=int, default=0,
                        help='conformance worker processes per backend (0: from the CPUs)')
    parser.add_argument('--pattern', default=None, help='conformance tests to run (regex)')
    parser.add_argument('--conformance-worker', choices=('cupy', 'numpy'),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.conformance_worker:
        return conformance_worker(args.conformance_worker, max(1, args.jobs), args.pattern)
    backend = args.backend or ('numpy' if args.dry_run else 'cupy')
    report = Report(args.out, args.budget_seconds)
    report.results.update(backend=backend, dry_run=args.dry_run, argv=sys.argv[1:])
    try:
        device = Device(backend)
    except Exception as e:
        report.log('backend %s unusable: %s; the stages run on numpy' % (backend, e))
        report.results['backend_error'] = str(e)
        device, backend = Device('numpy'), 'numpy'
    report.stage('A_env', 30, stage_env, device)
    # B and C in the background while A, D and E run; F after them, alone.
    cpus = os.cpu_count() or 2
    jobs = args.jobs or max(1, min(8, cpus // 2 - 1))
    pattern = args.pattern or ('^test_(relu|conv|batchnorm|gemm|add|softmax|affine_grid)'
                               if args.dry_run else None)
    background_until = time.time() + max(30, 0.5 * report.remaining())
    processes = {}
    for key, start in (('pytest', lambda: start_pytest(args.out, backend, args.dry_run)),
                       ('conformance_' + backend,
                        lambda: start_conformance(args.out, backend, jobs, pattern)),
                       ('conformance_numpy',
                        lambda: start_conformance(args.out, 'numpy', max(1, jobs // 2),
                                                  pattern))):
        if key in processes:  # backend numpy: one conformance run
            continue
        try:
            processes[key] = start()
        except Exception as e:
            report.log('could not start %s: %s' % (key, e))
    if os.path.isdir(args.fixtures):
        report.stage('D_fixtures', 90, stage_fixtures, device, args.fixtures)
        report.stage('E_memory', 40, stage_memory, device, args.fixtures)
    else:
        report.results['stages']['D_fixtures'] = {
            'status': 'skipped: %s missing (run benchmarks/gpu/make_fixtures.py and carry '
                      'result/gpu_fixtures)' % args.fixtures}
    how = {key: finish(p, background_until) for key, p in processes.items()}
    report.log('background: %s' % how)

    def collect_pytest(entry):
        return pytest_summary(args.out, backend, how.get('pytest', 'not started'))

    def collect_conformance(entry):
        return conformance_report(report, how.get('conformance_' + backend),
                                  how.get('conformance_numpy'), backend)
    report.stage('B_pytest', 20, collect_pytest)
    report.stage('C_conformance', 20, collect_conformance)
    report.stage('F_speed', 400, stage_speed, device, report, args.dry_run)
    summary(report)
    return 0


if __name__ == '__main__':
    sys.exit(main())
