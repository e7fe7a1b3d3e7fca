"""The benchmark results as a markdown report (tables and the issue's
targets, met or not) and a PNG chart."""
import numpy

LABELS = {
    'numpy': 'hand-written NumPy',
    'chainer': 'Chainer',
    'compile_onnx': 'Chainer + compile_onnx',
    'compiled_step': 'compiled training step',
    'pytorch': 'PyTorch eager',
}
SMALL_MLPS = ('MLP 784-100-100-10', 'MLP 10 layers, width 32')
COMPUTE_BOUND = ('MLP 784-1000-1000-10', 'LeNet-5', 'ResNet-18-style CNN')
INFERENCE_TARGETS = ('MLP 784-1000-1000-10', 'MLP 784-100-100-10', 'MLP 10 layers, width 32',
                     'LeNet-5')


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


def inference_table(results):
    lines = ['| model | batch | VM | onnxruntime | VM / onnxruntime | outputs agree |',
             '|---|---|---|---|---|---|']
    for row in results['inference']:
        vm, ort = row['ms']['vm'], row['ms']['onnxruntime']
        lines.append('| %s | %d | %.3f ms | %.3f ms | %.2f× | %s |' % (
            row['model'], row['batch'], vm, ort, vm / ort,
            'yes' if row['outputs_agree'] else 'NO'))
    return '\n'.join(lines)


def targets(results):
    """[(target, measured, met)] for the targets of the benchmark issue."""
    found = []
    training = {row['model']: row['ms'] for row in results['training']}
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
    return found


def markdown(results):
    notes = sorted({'%s' % row['notes'].get('pytorch') for row in results['training']})
    parts = [
        '## Training step (forward, softmax cross entropy, backward, %s update), '
        'median per iteration; ratio to hand-written NumPy' % results['optimizer'],
        '', training_table(results), '',
        'PyTorch: %s' % '; '.join(notes), '',
        '## Inference on the same exported ONNX file, median per call', '',
        inference_table(results), '',
        '## Targets', '',
        '| target | measured | met |', '|---|---|---|']
    parts += ['| %s | %s | %s |' % (name, measured, 'yes' if met else '**no**')
              for name, measured, met in targets(results)]
    return '\n'.join(parts) + '\n'


def chart(results, path):
    import matplotlib
    matplotlib.use('Agg')  # files only: no display here
    import matplotlib.pyplot as plt

    rows = results['training']
    impls = [i for i in LABELS if any(i in row['ms'] for row in rows)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5.5),
                                      gridspec_kw={'width_ratios': [3, 2]})
    positions = numpy.arange(len(rows))
    width = 0.8 / len(impls)
    for k, impl in enumerate(impls):
        ratios = [row['ms'].get(impl, numpy.nan) / row['ms']['numpy'] for row in rows]
        left.bar(positions + k * width, ratios, width, label=LABELS[impl])
    left.set_xticks(positions + width * (len(impls) - 1) / 2)
    left.set_xticklabels(['%s\nbatch %d' % (r['model'], r['batch']) for r in rows], fontsize=8)
    left.set_yscale('log')
    left.axhline(1.0, color='black', linewidth=0.8)
    left.set_ylabel('time per training step / hand-written NumPy (log)')
    left.set_title('Training step (%s)' % results['optimizer'])
    left.legend(fontsize=8)

    inference = results['inference']
    names = sorted({row['model'] for row in inference}, key=[r['model'] for r in inference].index)
    positions = numpy.arange(len(names))
    for k, batch in enumerate((1, 32)):
        ratios = [next((r['ms']['vm'] / r['ms']['onnxruntime'] for r in inference
                        if r['model'] == n and r['batch'] == batch), numpy.nan) for n in names]
        right.bar(positions + k * 0.4, ratios, 0.4, label='batch %d' % batch)
    right.set_xticks(positions + 0.2)
    right.set_xticklabels(names, fontsize=8, rotation=15)
    right.axhline(1.0, color='black', linewidth=0.8)
    right.axhline(1.5, color='red', linewidth=0.8, linestyle='--', label='target at batch 1')
    right.set_ylabel('VM time / onnxruntime time')
    right.set_title('Inference')
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
