"""The foreign-models benchmark's own logic (no torch, no C compiler): how
outputs are compared, how refusals are collected and listed, how the
tables read, and the executable built with the Makefile's defaults."""
import argparse
import os
import sys

import numpy
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks'))
import foreign_models as foreign  # noqa: E402
import inference_candidates as inference  # noqa: E402

from chainer_compiler.pipeline import build_program  # noqa: E402


def _program(*ops):
    """x -> op_1 -> ... -> y on a 2x3 float tensor."""
    names = ['x'] + ['v%d' % k for k in range(1, len(ops))] + ['y']
    nodes = [helper.make_node(op, [a], [b]) for op, a, b in zip(ops, names, names[1:])]
    graph = helper.make_graph(
        nodes, 'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2, 3])])
    return build_program(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)]))


def test_relative_error_scales_by_the_reference_and_flags_mismatches():
    reference = [numpy.array([100.0, -200.0])]
    assert foreign.relative_error(reference, [numpy.array([100.0, -200.0])]) == 0
    assert abs(foreign.relative_error(reference, [numpy.array([100.2, -200.0])]) - 1e-3) < 1e-9
    assert foreign.relative_error(reference, [numpy.zeros(3)]) == float('inf')
    assert foreign.relative_error(reference, []) == float('inf')


def test_every_refused_instruction_is_listed_with_its_operator():
    # Hardmax has no lowering; the Relu after it is lowered once its input
    # has the declared type, so only Hardmax is listed.
    refused = foreign.native_refusals(_program('Hardmax', 'Relu', 'Hardmax'))
    assert [op for op, _ in refused] == ['Hardmax', 'Hardmax']
    assert all('Hardmax' in reason for _, reason in refused)
    assert foreign.native_refusals(_program('Relu')) == []


def _accept_row(model, exporter, refused=(), **fields):
    return dict({'model': model, 'exporter': exporter, 'what': model.upper(),
                 'library': 'timm', 'instructions': 10, 'vm_error': 1e-7,
                 'refused': list(refused)}, **fields)


def test_acceptance_table_counts_and_names_every_refused_operator():
    rows = [_accept_row('a', 'torchscript', native_error=2e-7),
            _accept_row('a', 'dynamo', refused=[('Resize', 'mode cubic'),
                                                 ('Resize', 'mode cubic'),
                                                 ('GatherND', 'no C kernel')]),
            _accept_row('b', 'torchscript', native_error=0.5),
            {'model': 'b', 'exporter': 'dynamo', 'what': 'B', 'library': 'timm',
             'export_failure': 'TorchExportError: boom'}]
    text = '\n'.join(foreign.acceptance_markdown(rows))
    assert '4 files (2 models x 2 exporters); 3 exported, 3 compiled.' in text
    assert 'native accepts 2, and of the 2 it ran, 1 match onnxruntime' in text
    assert '| Resize (2), GatherND (1) |' in text
    assert 'export failed: TorchExportError: boom' in text
    assert 'NO (5e-01)' in text
    listing = foreign.refusals_text(rows)
    assert 'a.torchscript: accepted\n' in listing
    assert '    Resize: mode cubic\n    GatherND: no C kernel\n' in listing
    assert 'b.dynamo: not compiled: TorchExportError: boom' in listing


def test_timing_table_gives_ratios_to_onnxruntime_and_the_second_thread():
    ms = {'native_quiet_threads_1': 2.0, 'onnxruntime_quiet_threads_1': 1.0,
          'vm_quiet_threads_1': 8.0, 'native_busy_threads_1': 3.0,
          'onnxruntime_busy_threads_1': 1.5, 'native_quiet_threads_default': 1.0,
          'onnxruntime_quiet_threads_default': 1.0, 'native_busy_threads_default': 6.0,
          'onnxruntime_busy_threads_default': 2.0, 'native_busymean_threads_default': 6.5,
          'onnxruntime_busymean_threads_default': 13.0}
    text = '\n'.join(foreign.timing_markdown(
        [{'model': 'a', 'exporter': 'torchscript', 'batch': 1, 'ms': ms}]))
    # 1T, default, 1T busy, default busy (medians, then means), 2T/1T busy
    # (6 / 3), VM (8 / 1)
    assert '| a | torchscript | 1 | 2.00 | 1.00 | 2.00x | 1.00x | 2.00x | 3.00x | 0.50x | ' \
           '2.00x | 8.00x |' in text
    assert '| batch 1, busy default | 3.00x | 3.00x |' in text
    assert '| batch 1, busy default, means | 0.50x | 0.50x |' in text
    # The ratio timed interleaved in one process, when there, over the two
    # processes' medians.
    ms['native_2t_over_1t_busy_threads_default'] = 0.9
    text = '\n'.join(foreign.timing_markdown(
        [{'model': 'a', 'exporter': 'torchscript', 'batch': 1, 'ms': ms}]))
    assert '| 3.00x | 0.50x | 0.90x | 8.00x |' in text


def test_profiles_are_of_the_worst_three_of_each_batch_size(monkeypatch):
    def row(model, batch, native):
        return {'model': model, 'exporter': 'torchscript', 'batch': batch,
                'ms': {'native_quiet_threads_1': native, 'onnxruntime_quiet_threads_1': 1.0}}
    timings = [row('a', 1, 1.1), row('b', 1, 2.0), row('c', 1, 1.5), row('d', 1, 1.8),
               row('a', 32, 1.3), row('b', 32, 0.9)]
    calls = []

    def worker(kind, args, model, exporter, threads=1, batch=1, extra=()):
        calls.append((kind, model, batch))
        return {'layers': [], 'native_ops': {}, 'ort_ops': {}}
    monkeypatch.setattr(foreign, 'run_worker', worker)
    rows = foreign.profile_stage(None, {}, timings)
    assert calls == [('profile', 'b', 1), ('profile', 'd', 1), ('profile', 'c', 1),
                     ('profile', 'a', 32), ('profile', 'b', 32)]
    assert '### a (torchscript export, batch 32), 1.30x' in '\n'.join(
        foreign.profile_markdown(rows))


def test_without_the_time_stage_the_models_asked_for_are_profiled(monkeypatch):
    # --stages profile alone used to write an empty table.
    calls = []

    def worker(kind, args, model, exporter, threads=1, batch=1, extra=()):
        calls.append((model, exporter, batch))
        return {'layers': [], 'native_ops': {}, 'ort_ops': {}}
    monkeypatch.setattr(foreign, 'run_worker', worker)
    manifest = {foreign.file_name(m, e, b): {'status': 'ok'}
                for m, e, b in [('a', 'torchscript', 1), ('a', 'dynamo', 1),
                                ('b', 'dynamo', 1), ('a', 'torchscript', 32)]}
    args = argparse.Namespace(models=['a', 'b', 'c'], batches=[1, 32],
                              time_exporters=['torchscript', 'dynamo'])
    rows = foreign.profile_stage(args, manifest, [])
    assert calls == [('a', 'torchscript', 1), ('a', 'torchscript', 32), ('b', 'dynamo', 1)]
    assert '### b (dynamo export, batch 1), n/a' in '\n'.join(foreign.profile_markdown(rows))


def test_executable_can_be_built_with_the_makefiles_defaults(tmp_path):
    # make_variables=() passes nothing: the emitted Makefile's own defaults.
    (tmp_path / 'Makefile').write_text('all:\n\t@echo "error: ARCH=[$(ARCH)]" >&2; exit 1\n')
    build = inference.NativeBuild(str(tmp_path), emit_s=0.1)
    inference._compile(build, timeout_s=30, make_variables=())
    assert build.failure == 'make failed: error: ARCH=[]'
    inference._compile(build, timeout_s=30)
    assert build.failure == 'make failed: error: ARCH=[-march=native]'
