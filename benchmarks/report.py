"""The benchmark results as a markdown report (tables and the issue's
targets, met or not) and a PNG chart."""
import numpy

LABELS = {
    'numpy': 'hand-written NumPy',
    'chainer': 'Chainer',
    'compile_onnx': 'Chainer + compile_onnx',
    'compile_onnx_native': 'Chainer + compile_onnx, native',
    'compile_onnx_native_packed': 'Chainer + compile_onnx, native, packed parameters',
    'compiled_step': 'compiled training step',
    'compiled_step_native': 'compiled training step, native',
    'pytorch': 'PyTorch eager',
    # bench.BUSY_IMPLS, timed beside one competing busy process.
    'chainer_busy': 'Chainer, busy neighbour',
    'compiled_step_native_busy': 'compiled training step, native, busy neighbour',
    'pytorch_busy': 'PyTorch eager, busy neighbour',
}
SMALL_MLPS = ('MLP 784-100-100-10', 'MLP 10 layers, width 32')
COMPUTE_BOUND = ('MLP 784-1000-1000-10', 'LeNet-5', 'ResNet-18-style CNN')
INFERENCE_TARGETS = ('MLP 784-1000-1000-10', 'MLP 784-100-100-10', 'MLP 10 layers, width 32',
                     'LeNet-5')
INFERENCE_LABELS = {
    'vm': 'VM',
    'onnxruntime': 'onnxruntime',
    'native': 'native, in Python',
    'executable': 'native executable',
}
NATIVE_IMPLS = ('native', 'executable')
#: The native backend's time (in Python) as a ratio to onnxruntime's must
#: be at most this: 1.0 at batch 1 for the MLPs and LeNet-5, 1.5 for the
#: CNNs at batch 1 and for every model at batch 32.
NATIVE_FASTER_AT_BATCH_1 = INFERENCE_TARGETS
NATIVE_MAX_RATIO = 1.5
#: Emitting and compiling this model's C must take under BUILD_TARGET_S.
BUILD_TARGET_MODEL = 'ResNet-50'
BUILD_TARGET_S = 60.0
#: The native training step's targets (issue 15): model -> (the column it
#: is compared with, the largest ratio to it).
NATIVE_STEP_TARGETS = {
    'MLP 784-100-100-10': ('numpy', 0.5),
    'MLP 10 layers, width 32': ('numpy', 0.5),
    'LeNet-5': ('numpy', 0.8),
    'MLP 784-1000-1000-10': ('numpy', 1.0),
    'ResNet-18-style CNN': ('pytorch', 1.0),
}
#: compile_onnx with the native backend must be at least this many times
#: faster than plain Chainer on this model (issue 15), with Adam and
#: L.Classifier computing accuracy: judged in runs of that configuration only.
NATIVE_COMPILE_ONNX_TARGET = ('MLP 784-100-100-10', 2.0)
NATIVE_COMPILE_ONNX_CONFIGURATION = {'optimizer': 'adam', 'accuracy': True}
#: Issue 31: the native step at least this many times faster than Chainer
#: on this model with Adam and accuracy, quiet and with a busy neighbour;
#: the ResNet-18-style step (NATIVE_STEP_TARGETS) no slower than PyTorch
#: with a busy neighbour too.
NATIVE_STEP_SPEEDUP_TARGET = ('MLP 784-100-100-10', 10.0)


def _cell(ms, floor):
    if ms is None:
        return 'n/a'
    return '%.3f ms (%.2f×)' % (ms, ms / floor)


def training_table(results):
    impls = list(LABELS)
    lines = ['| model | batch | %s | first-step losses agree |' % ' | '.join(
        LABELS[i] for i in impls), '|---|---|' + '---|' * len(impls) + '---|']
    for row in results['training']:
        floor = row['ms']['numpy']
        losses = list(row['first_loss'].values())
        agree = numpy.allclose(losses, losses[0], rtol=1e-3)
        lines.append('| %s | %d | %s | %s |' % (
            row['model'], row['batch'],
            ' | '.join(_cell(row['ms'].get(i), floor) for i in impls),
            'yes' if agree else 'NO: %s' % ', '.join('%.5f' % v for v in losses)))
    return '\n'.join(lines)


def _reason(row, impl):
    return row.get('notes', {}).get(impl) or 'not measured'


def inference_table(results):
    impls = list(INFERENCE_LABELS)
    lines = ['| model | batch | %s | outputs agree with onnxruntime |' % ' | '.join(
        INFERENCE_LABELS[i] for i in impls), '|---|---|' + '---|' * len(impls) + '---|']
    for row in results['inference']:
        floor = row['ms']['onnxruntime']
        disagree = [INFERENCE_LABELS[i] for i, ok in row['outputs_agree'].items() if not ok]
        cells = [_cell(row['ms'].get(i), floor) for i in impls]
        if 'executable_best_ms' in row:
            cells[impls.index('executable')] += ', best %.3f ms' % row['executable_best_ms']
        lines.append('| %s | %d | %s | %s |' % (
            row['model'], row['batch'], ' | '.join(cells),
            'NO: %s' % ', '.join(disagree) if disagree else 'yes'))
    return '\n'.join(lines)


def _size(nbytes):
    if nbytes is None:
        return 'n/a'
    if nbytes < 2 ** 20:
        return '%.1f KiB' % (nbytes / 2 ** 10)
    return '%.2f MiB' % (nbytes / 2 ** 20)


def _seconds(s):
    return 'n/a' if s is None else '%.2f s' % s


def _arena_fits(row):
    """Whether the native arena is no larger than the VM's peak (None: unknown)."""
    arena = row['build']['arena_bytes']
    return None if arena is None else arena <= row['memory']['vm_peak_bytes']


def native_table(results):
    """Emit and compile time of the native C, its arena beside the VM's
    peak memory for the same Program, and why any native column is n/a."""
    lines = ['| model | batch | emit | C compile | native arena | VM peak (weights '
             'included) | VM peak less weights | arena ≤ VM peak | why n/a |',
             '|---|---|---|---|---|---|---|---|---|']
    for row in results['inference']:
        build, memory = row['build'], row['memory']
        fits = _arena_fits(row)
        reasons = ['%s: %s' % (INFERENCE_LABELS[i], _reason(row, i))
                   for i in NATIVE_IMPLS if i not in row['ms']]
        lines.append('| %s | %d | %s | %s | %s | %s | %s | %s | %s |' % (
            row['model'], row['batch'], _seconds(build['emit_s']),
            _seconds(build['compile_s']), _size(build['arena_bytes']),
            _size(memory['vm_peak_bytes']),
            _size(memory['vm_peak_bytes'] - memory['constant_bytes']),
            'n/a' if fits is None else 'yes' if fits else '**no**',
            '; '.join(reasons).replace('|', '/') or '-'))
    return '\n'.join(lines)


#: The configuration of the benchmark issue's training targets (issue 5:
#: SGD, accuracy off); other runs do not judge them.
DEFAULT_CONFIGURATION = {'optimizer': 'sgd', 'accuracy': False}


def _configuration(results):
    return {'optimizer': results.get('optimizer'), 'accuracy': bool(results.get('accuracy'))}


def targets(results):
    """[(target, measured, met)] for the targets of the benchmark issue and
    the native backend's, those the run's configuration is for."""
    found = []
    training = {row['model']: row['ms'] for row in results['training']
                if _configuration(results) == DEFAULT_CONFIGURATION}
    for model in SMALL_MLPS:
        if model in training:
            ms = training[model]
            ratio = ms['compiled_step'] / ms['numpy']
            found.append(('compiled step ≤ 1.2× NumPy, %s' % model, '%.2f×' % ratio,
                          ratio <= 1.2))
            speedup = ms['chainer'] / ms['compile_onnx']
            found.append(('compile_onnx ≥ 2× faster than Chainer, %s' % model,
                          '%.2f× faster' % speedup, speedup >= 2))
    for model in COMPUTE_BOUND:
        if model in training:
            ms = training[model]
            for impl in ('compile_onnx', 'compiled_step'):
                ratio = ms[impl] / ms['chainer']
                found.append(('%s no slower than Chainer, %s' % (LABELS[impl], model),
                              '%.2f× Chainer\'s time' % ratio, ratio <= 1.0))
    for row in results['inference']:
        if row['batch'] == 1 and row['model'] in INFERENCE_TARGETS:
            ratio = row['ms']['vm'] / row['ms']['onnxruntime']
            found.append(('inference ≤ 1.5× onnxruntime at batch 1, %s' % row['model'],
                          '%.2f×' % ratio, ratio <= 1.5))
    return found + native_step_targets(results) + native_targets(results)


def native_step_targets(results):
    """The native training step's speed against hand-written NumPy (or
    PyTorch eager for the ResNet-18-style CNN), n/a when it was not run."""
    found = []
    for row in results['training']:
        if row['model'] not in NATIVE_STEP_TARGETS:
            continue
        base, limit = NATIVE_STEP_TARGETS[row['model']]
        target = '%s ≤ %.1f× %s, %s' % (LABELS['compiled_step_native'], limit, LABELS[base],
                                        row['model'])
        native, reference = row['ms'].get('compiled_step_native'), row['ms'].get(base)
        if native is None or reference is None:
            missing = 'compiled_step_native' if native is None else base
            found.append((target, 'n/a: %s' % _reason(row, missing), False))
        else:
            found.append((target, '%.2f×' % (native / reference), native / reference <= limit))
    found += _busy_step_targets(results)
    model, speedup = NATIVE_COMPILE_ONNX_TARGET
    for row in results['training']:
        if row['model'] != model or _configuration(results) != NATIVE_COMPILE_ONNX_CONFIGURATION:
            continue
        for impl in ('compile_onnx_native', 'compile_onnx_native_packed'):
            target = '%s ≥ %.0f× faster than Chainer, %s, Adam, accuracy on' % (
                LABELS[impl], speedup, model)
            native = row['ms'].get(impl)
            if native is None:
                found.append((target, 'n/a: %s' % _reason(row, impl), False))
            else:
                measured = row['ms']['chainer'] / native
                found.append((target, '%.2f× faster' % measured, measured >= speedup))
    return found


def _busy_step_targets(results):
    """Issue 31's training targets: the native step's speed-up over
    Chainer (runs with Adam and accuracy), quiet and with a busy neighbour,
    and the ResNet-18-style step against PyTorch with a busy neighbour (the
    quiet one is NATIVE_STEP_TARGETS')."""
    found = []
    model, speedup = NATIVE_STEP_SPEEDUP_TARGET
    resnet_limit = NATIVE_STEP_TARGETS['ResNet-18-style CNN'][1]
    for row in results['training']:
        checks = []
        if row['model'] == model and \
                _configuration(results) == NATIVE_COMPILE_ONNX_CONFIGURATION:
            checks = [('', 'chainer', speedup), ('_busy', 'chainer', speedup)]
        elif row['model'] == 'ResNet-18-style CNN':
            checks = [('_busy', 'pytorch', resnet_limit)]
        for load, base, limit in checks:
            native, other = row['ms'].get('compiled_step_native' + load), row['ms'].get(base + load)
            target = ('%s ≥ %.0f× faster than Chainer, %s, Adam, accuracy on' if base == 'chainer'
                      else '%s ≤ %.1f× PyTorch eager, %s') % (
                LABELS['compiled_step_native'], limit, row['model'])
            target += ', busy neighbour' if load else ''
            if native is None or other is None:
                missing = 'compiled_step_native' if native is None else base
                found.append((target, 'n/a: %s' % _reason(row, missing), False))
            elif base == 'chainer':
                found.append((target, '%.1f× faster' % (other / native), other / native >= limit))
            else:
                found.append((target, '%.2f×' % (native / other), native / other <= limit))
    return found


def native_targets(results):
    """The native backend's targets: its speed against onnxruntime;
    ResNet-50's C emitted and compiled in under a minute; every arena no
    larger than the VM's peak memory."""
    found = []
    for row in results['inference']:
        limit = 1.0 if row['batch'] == 1 and row['model'] in NATIVE_FASTER_AT_BATCH_1 \
            else NATIVE_MAX_RATIO
        target = 'native ≤ %.1f× onnxruntime at batch %d, %s' % (limit, row['batch'],
                                                                 row['model'])
        native = row['ms'].get('native')
        if native is None:
            found.append((target, 'n/a: %s' % _reason(row, 'native'), False))
        else:
            ratio = native / row['ms']['onnxruntime']
            found.append((target, '%.2f×' % ratio, ratio <= limit))
    for row in results['inference']:
        if row['model'] != BUILD_TARGET_MODEL:
            continue
        target = 'native emit + C compile < %.0f s, %s' % (BUILD_TARGET_S, row['model'])
        emit_s, compile_s = row['build']['emit_s'], row['build']['compile_s']
        if emit_s is None or compile_s is None:
            found.append((target, 'n/a: %s' % _reason(row, 'executable'), False))
        else:
            total = emit_s + compile_s
            found.append((target, '%.1f s (emit %.1f s, compile %.1f s)' % (
                total, emit_s, compile_s), total < BUILD_TARGET_S))
    fits = [(_arena_fits(row), row) for row in results['inference']]
    known = [(fit, row) for fit, row in fits if fit is not None]
    if known:
        misses = ['%s batch %d' % (row['model'], row['batch']) for fit, row in known if not fit]
        found.append(('native arena ≤ VM peak memory, every model emitted',
                      '%d of %d%s' % (len(known) - len(misses), len(known),
                                      ' (not: %s)' % ', '.join(misses) if misses else ''),
                      not misses))
    return found


def markdown(results):
    parts = []
    if results['training']:  # none with --inference-only
        notes = sorted({'%s' % row['notes'].get('pytorch') for row in results['training']})
        parts += [
            '## Training step (forward, softmax cross entropy%s, backward, %s update), '
            'median per iteration; ratio to hand-written NumPy' % (
                ', accuracy' if results.get('accuracy') else '', results['optimizer']),
            '', training_table(results), '',
            'PyTorch: %s' % '; '.join(notes), '']
    if results['inference']:  # none with --training-only
        parts += [
            '## Inference on the same exported ONNX file; ratio to onnxruntime', '',
            'Median per call, but the native executable\'s figure is the mean of its own '
            '`--iterations` loop (benchmarks/NOTES.md says how to read the native columns).',
            '', inference_table(results), '',
            '## Native backend: build time and memory', '',
            native_table(results), '']
    parts += [
        '## Targets', '',
        '| target | measured | met |', '|---|---|---|']
    parts += ['| %s | %s | %s |' % (name, measured, 'yes' if met else '**no**')
              for name, measured, met in targets(results)]
    return '\n'.join(parts) + '\n'


def _training_panel(axes, results):
    rows = results['training']
    impls = [i for i in LABELS if any(i in row['ms'] for row in rows)]
    positions = numpy.arange(len(rows))
    width = 0.8 / max(1, len(impls))
    for k, impl in enumerate(impls):
        ratios = [row['ms'].get(impl, numpy.nan) / row['ms']['numpy'] for row in rows]
        axes.bar(positions + k * width, ratios, width, label=LABELS[impl])
    axes.set_xticks(positions + width * (len(impls) - 1) / 2)
    axes.set_xticklabels(['%s\nbatch %d' % (r['model'], r['batch']) for r in rows], fontsize=8)
    axes.set_yscale('log')
    axes.axhline(1.0, color='black', linewidth=0.8)
    axes.set_ylabel('time per training step / hand-written NumPy (log)')
    axes.set_title('Training step (%s)' % results['optimizer'])
    if impls:
        axes.legend(fontsize=8)


def _inference_panel(axes, results):
    inference = results['inference']
    names = sorted({row['model'] for row in inference}, key=[r['model'] for r in inference].index)
    positions = numpy.arange(len(names))
    series = [(impl, batch) for impl in ('vm', 'native', 'executable') for batch in (1, 32)]
    width = 0.8 / len(series)
    for k, (impl, batch) in enumerate(series):
        ratios = [next((r['ms'].get(impl, numpy.nan) / r['ms']['onnxruntime']
                        for r in inference if r['model'] == n and r['batch'] == batch),
                       numpy.nan) for n in names]
        axes.bar(positions + k * width, ratios, width,
                 label='%s, batch %d' % (INFERENCE_LABELS[impl], batch))
    axes.set_xticks(positions + width * (len(series) - 1) / 2)
    axes.set_xticklabels(names, fontsize=8, rotation=15)
    axes.set_yscale('log')
    axes.axhline(1.0, color='black', linewidth=0.8)
    axes.axhline(1.5, color='red', linewidth=0.8, linestyle='--', label='VM target at batch 1')
    axes.set_ylabel('time / onnxruntime time (log)')
    axes.set_title('Inference')
    axes.legend(fontsize=7)


def chart(results, path):
    import matplotlib
    matplotlib.use('Agg')  # files only: no display here
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5.5),
                                      gridspec_kw={'width_ratios': [3, 2]})
    _training_panel(left, results)
    _inference_panel(right, results)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
