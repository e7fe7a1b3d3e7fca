"""Should the native backend link OpenBLAS for large products?  Times its
own SGEMM against cblas_sgemm of the scipy-openblas32 wheel on the shapes
of the benchmark models, on one thread and on every core, and prints a
markdown table (benchmarks/NOTES.md has the result and the decision).

    .venv/bin/pip install scipy-openblas32    # not a dependency of the project
    .venv/bin/python benchmarks/openblas_gemm.py
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(HERE, os.pardir, 'runtime', 'native', 'kernels')


def build(folder):
    """The harness, compiled as the in-Python library is (-O3 -march=native, the
    thread pool)."""
    import scipy_openblas32 as openblas
    exe = os.path.join(folder, 'gemm_vs_openblas')
    subprocess.run(['cc', '-O3', '-march=native', '-std=c99', '-pthread', '-I', KERNELS,
                    '-I', openblas.get_include_dir(), os.path.join(HERE, 'gemm_vs_openblas.c'),
                    os.path.join(KERNELS, 'ccn_gemm.c'), os.path.join(KERNELS, 'ccn_threads.c'),
                    '-L', openblas.get_lib_dir(),
                    '-l' + openblas.get_library(), '-Wl,-rpath,' + openblas.get_lib_dir(),
                    '-lm', '-o', exe], check=True)
    return exe


def main():
    try:
        import scipy_openblas32  # noqa: F401
    except ImportError:
        sys.exit('scipy-openblas32 is not installed: pip install scipy-openblas32')
    with tempfile.TemporaryDirectory() as folder:
        exe = build(folder)
        print('| threads | M x N x K | native ms | native GFLOPS | OpenBLAS ms | OpenBLAS GFLOPS '
              '| OpenBLAS / native |')
        print('|---|---|---|---|---|---|---|')
        for threads in ('1', str(os.cpu_count())):
            env = dict(os.environ, CHAINER_COMPILER_THREADS=threads,
                       OPENBLAS_NUM_THREADS=threads)
            out = subprocess.run([exe], env=env, capture_output=True, text=True, check=True)
            for line in out.stdout.splitlines():
                m, n, k, ours, ours_gf, theirs, theirs_gf = line.split()
                print('| %s | %s x %s x %s | %s | %s | %s | %s | %.2f× |' % (
                    threads, m, n, k, ours, ours_gf, theirs, theirs_gf,
                    float(theirs) / float(ours)))


if __name__ == '__main__':
    main()
