"""Images per second of examples/imagenet/train_imagenet_multi.py with one
and two MPI processes (naive communicator, CPU), plain Chainer and
compiled, for the small model and ResNet-50 at small crops.

Each configuration is a real ``mpiexec -n P`` run of the example on a
synthetic class-folder dataset.  Rank 0 logs every iteration; the rate is
taken between the end of the warm-up iterations (the first compiles the
programs and broadcasts rank 0's parameters) and the last one, so start-up
(imports, loading and compiling the ONNX file) is reported apart.  With P
processes, each trains on its own batch: images/s counts all of them.

On a machine with fewer free cores than processes the processes share
cores, and two processes cannot be twice as fast as one.  Prints a
Markdown table and writes result/bench/imagenet_multi.json.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
EXAMPLE = os.path.join(ROOT, 'examples', 'imagenet')
SCRIPT = os.path.join(EXAMPLE, 'train_imagenet_multi.py')
MPIEXEC = [os.path.join(os.path.dirname(sys.executable), 'mpiexec'), '--allow-run-as-root',
           '--oversubscribe']
#: (model, crop size, batch size per process, timed iterations).
CONFIGS = [('small', 32, 8, 10), ('resnet50', 32, 2, 4)]
WARMUP = 2
CLASSES = 4


def run(command, cwd):
    """Run ``command``; its output on failure, as an exception."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError('%s failed (%d):\n%s%s' % (' '.join(command), done.returncode,
                                                      done.stdout, done.stderr))


def measure(workdir, model, crop, batch, iterations, processes, onnx_file):
    """One run: {'images_per_s', 's_per_iteration', 'startup_s'}."""
    out = os.path.join(workdir, 'out-%s-%d-%s' % (model, processes, bool(onnx_file)))
    total = WARMUP + iterations
    command = MPIEXEC + ['-n', str(processes), sys.executable, SCRIPT, 'data/train', 'data/val',
                         '--model', model, '--classes', str(CLASSES), '--crop-size', str(crop),
                         '--batchsize', str(batch), '--iterations', str(total),
                         '--log-interval', '1', '--val-interval', str(10 * total),
                         '--noplot', '--out', out]
    if onnx_file:
        command += ['--compile', onnx_file]
    start = time.perf_counter()
    run(command, workdir)
    wall = time.perf_counter() - start
    with open(os.path.join(out, 'log')) as f:
        elapsed = {entry['iteration']: entry['elapsed_time'] for entry in json.load(f)}
    seconds = elapsed[total] - elapsed[WARMUP]
    return {'images_per_s': batch * processes * iterations / seconds,
            's_per_iteration': seconds / iterations,
            'startup_s': wall - elapsed[total]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--models', nargs='+', default=[c[0] for c in CONFIGS],
                        choices=[c[0] for c in CONFIGS])
    parser.add_argument('--out', default=os.path.join(ROOT, 'result', 'bench',
                                                      'imagenet_multi.json'))
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        run([sys.executable, os.path.join(EXAMPLE, 'make_demo_dataset.py'), 'data',
             '--classes', str(CLASSES)], workdir)
        for model, crop, batch, iterations in CONFIGS:
            if model not in args.models:
                continue
            onnx_file = '%s.onnx' % model
            run([sys.executable, SCRIPT, '--export', onnx_file, '--model', model, '--classes',
                 str(CLASSES), '--crop-size', str(crop), '--batchsize', str(batch)], workdir)
            for compiled in (False, True):
                for processes in (1, 2):
                    result = measure(workdir, model, crop, batch, iterations, processes,
                                     onnx_file if compiled else None)
                    rows.append(dict(model=model, crop=crop, batch=batch, processes=processes,
                                     mode='compiled' if compiled else 'plain', **result))
                    print('.', end='', file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print_table(rows)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump({'cpus': os.cpu_count(), 'load_average': os.getloadavg(), 'rows': rows}, f,
                  indent=1)
    print('\nwritten to %s (cpus: %d, load average at the end: %.1f)'
          % (args.out, os.cpu_count(), os.getloadavg()[0]))


def print_table(rows):
    print('| model | crop | batch/process | mode | processes | images/s | s/iteration '
          '| 2 vs 1 process | start-up (s) |')
    print('|---|---|---|---|---|---|---|---|---|')
    single = {(r['model'], r['mode']): r['images_per_s'] for r in rows if r['processes'] == 1}
    for r in rows:
        scaling = r['images_per_s'] / single[r['model'], r['mode']]
        print('| %s | %d | %d | %s | %d | %.1f | %.3f | %s | %.1f |' % (
            r['model'], r['crop'], r['batch'], r['mode'], r['processes'], r['images_per_s'],
            r['s_per_iteration'], '%.2fx' % scaling if r['processes'] == 2 else '',
            r['startup_s']))


if __name__ == '__main__':
    main()
