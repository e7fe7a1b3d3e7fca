"""The emitted Makefile's default build: the products (ccn_gemm.c) also
built for x86-64-v3 and -v4 (render.gemm_variant), the best one this CPU
runs chosen at run time."""
import os
import platform
import subprocess

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import emit_c
from chainer_compiler.runtime.native.render import (
    _C_DEFINITION,
    GEMM_LEVELS,
    KERNEL_DIR,
    gemm_variant,
    prefix_kernel_symbols,
)
from tests.runtime.native.helpers import Built, make_folder, make_model


def _exported(text):
    return sorted(m.group(1) for m in _C_DEFINITION.finditer(text)
                  if not m.group(0).startswith('static'))


def test_each_level_renames_every_function_the_file_exports():
    with open(os.path.join(KERNEL_DIR, 'ccn_gemm.c')) as f:
        text = prefix_kernel_symbols(f.read(), 'm')
    names = _exported(text)
    assert 'm_ccn_gemm_ex' in names and 'm_ccn_gemm_serial_core' in names
    for level in GEMM_LEVELS:
        variant = gemm_variant(text, level)
        assert _exported(variant) == sorted('%s_v%d' % (n, level) for n in names)
        # Calls of other families (the thread pool) keep their names.
        assert 'm_ccn_parallel_for(' in variant


@pytest.mark.native_build
@pytest.mark.skipif(platform.machine() != 'x86_64', reason='the levels are x86-64 ones')
def test_the_default_build_has_every_level_and_matches_the_executor(tmp_path):
    rng = numpy.random.RandomState(0)
    model = make_model([helper.make_node('Gemm', ['x', 'w'], ['h']),
                        helper.make_node('Relu', ['h'], ['y'])],
                       [('x', numpy.float32, [64, 300])], [('y', numpy.float32, [64, 200])],
                       {'w': rng.uniform(-1, 1, (300, 200)).astype(numpy.float32)})
    program = build_program(model)
    folder = tmp_path / 'c'
    result = emit_c(program, folder, 'mv')
    built = Built(program, str(folder), 'mv', result, make_folder(folder))
    symbols = subprocess.run(['nm', str(folder / 'libmv.a')], capture_output=True,
                             text=True).stdout
    probe = subprocess.run(['cc', '-march=x86-64-v4', '-x', 'c', '-', '-o', os.devnull],
                           input='int main(void){return 0;}\n', capture_output=True, text=True)
    if probe.returncode == 0:  # a compiler that knows the levels (gcc 11, clang 12)
        for level in GEMM_LEVELS:
            assert 'mv_ccn_gemm_serial_core_v%d' % level in symbols
    built.check_against_executor([rng.uniform(-1, 1, (64, 300)).astype(numpy.float32)],
                                 tmp_path)
