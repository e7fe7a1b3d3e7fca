"""Text from a model or Program file reaches the emitted C only as escaped
string literals: names of nodes, inputs, outputs, intermediates and
constants, and string attributes, whatever their bytes, change nothing in
the C outside its string literals (tests/runtime/native/c_text.py reads C as
the compiler does), and hypothesis fuzzes both that and the compiled
results.  Also: which model names emit-c accepts, and the files it refuses
to replace."""
import itertools
import os
import re
import shutil
import subprocess
from dataclasses import replace

import numpy
import onnx
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler.cli import main as cli_main
from chainer_compiler.errors import InvalidModelError, UnsupportedOperatorsError
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.errors import RuntimeVMError
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import NativeEmitError, emit_c
from chainer_compiler.runtime.native.emit_c import MANIFEST, check_model_name
from chainer_compiler.runtime.serialization import load_program, save_program
from tests.runtime.native.c_text import split_c

CC = shutil.which('cc') or shutil.which('gcc')
needs_cc = pytest.mark.skipif(CC is None or shutil.which('make') is None,
                              reason='no C compiler (cc/gcc) or make on PATH')

#: Sequences that end a comment, start one, splice lines, form a trigraph
#: (gcc -std=c99 reads them) or end a string literal.
SEQUENCES = ['*/', '/*', '//', '\\\n', '\\', '??/', '??/\n', '??=', '??)', '"', "'", '\n#',
             '%:', '<%', '\r\n', 'x' * 10_000]
#: Every byte as a character (a name is text: ONNX refuses names that are
#: not UTF-8), and the sequences.
HOSTILE = [chr(b) for b in range(256)] + SEQUENCES


def payload(marker, k):
    """C that creates ``marker`` if it is ever compiled as code, made
    unique by ``k`` (names must differ)."""
    command = 'system("touch %s")' % marker
    return ['*/ int p%d = %s; /*' % (k, command), '\n int q%d = %s;\n' % (k, command),
            '??/\n int r%d = %s;' % (k, command), '\\\n int s%d = %s;' % (k, command),
            '"); %s; //' % command][k % 5] + ' %d' % k


def _conv_chain(length):
    """x[1, 1, 3, 3] -> Conv(auto_pad) -> Neg -> ... -> Neg: each Neg's
    result is a graph output."""
    f32 = TensorProto.FLOAT
    nodes = [helper.make_node('Conv', ['x', 'w'], ['c'], name='conv', auto_pad='NOTSET')]
    previous = 'c'
    for k in range(length):
        nodes.append(helper.make_node('Neg', [previous], ['h%d' % k], name='neg%d' % k))
        previous = 'h%d' % k
    graph = helper.make_graph(
        nodes, 'chain', [helper.make_tensor_value_info('x', f32, [1, 1, 3, 3])],
        [helper.make_tensor_value_info('h%d' % k, f32, [1, 1, 3, 3]) for k in range(length)],
        [numpy_helper.from_array(numpy.full((1, 1, 1, 1), 2, numpy.float32), 'w')])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])


def renamed(program, names):
    """``program`` with every name (inputs, outputs, registers,
    instructions) and string attribute taken in turn from ``names``, again
    from its start when it runs out."""
    supply = itertools.cycle(names)
    inputs = [replace(v, name=next(supply)) for v in program.inputs]
    outputs = [replace(v, name=next(supply)) for v in program.outputs]
    registers = {r: next(supply) for r in sorted(program.register_names)}
    instructions = [replace(inst, name=next(supply), attrs={
        k: next(supply) if isinstance(v, str) else v for k, v in inst.attrs.items()})
        for inst in program.instructions]
    return replace(program, inputs=inputs, outputs=outputs, register_names=registers,
                   instructions=instructions)


def _emitted(program, folder, **options):
    """{file name: (code without literals, literals)} of the C emit_c
    wrote, (bytes, []) of the Makefile and the weights, (file names, []) of
    the manifest (its digests follow the literals)."""
    emit_c(program, folder, **options)
    return {name: split_c((folder / name).read_text()) if name.endswith(('.c', '.h'))
            else ([line.split('  ')[-1] for line in (folder / name).read_text().splitlines()],
                  []) if name == MANIFEST
            else ((folder / name).read_bytes(), []) for name in sorted(os.listdir(folder))}


def _c_names(program):
    """The names that belong in the C: those of inputs and outputs, in the
    tables NAME_inputs and NAME_outputs and the header's macros."""
    return {v.name.encode('utf-8', 'surrogatepass') for v in program.inputs + program.outputs}


def assert_names_only_in_literals(program, reference, tmp_path, **options):
    """The C of ``program`` differs from that of ``reference`` (the same
    Program under other names) only inside string literals, and those
    literals hold ``program``'s input and output names exactly."""
    got = _emitted(program, tmp_path / 'named', **options)
    want = _emitted(reference, tmp_path / 'reference', **options)
    assert got.keys() == want.keys()
    for name in got:
        assert got[name][0] == want[name][0], name  # the code, comments included
    literals = {s for _, strings in got.values() for s in strings}
    assert _c_names(program) <= literals


def test_every_byte_and_sequence_in_every_name_stays_in_string_literals(tmp_path):
    base = build_program(_conv_chain(len(HOSTILE)))
    hostile = renamed(base, HOSTILE)
    reference = renamed(base, ['n%d' % k for k in range(5 * len(HOSTILE))])
    for weights in ('embed', 'file'):
        assert_names_only_in_literals(hostile, reference, tmp_path / weights, weights=weights)


@needs_cc
@pytest.mark.slow  # 266 outputs, and the kernels if no other test built them
def test_every_byte_and_sequence_in_every_name_compiles_to_the_vms_result(monkeypatch,
                                                                         native_cache):
    monkeypatch.setenv('CHAINER_COMPILER_CACHE', str(native_cache))
    program = renamed(build_program(_conv_chain(len(HOSTILE))), HOSTILE)
    x = numpy.linspace(-1, 1, 9, dtype=numpy.float32).reshape(1, 1, 3, 3)
    got = Executor(program, backend='native').run_positional([x])
    for g, w in zip(got, Executor(program).run_positional([x])):
        numpy.testing.assert_array_equal(g, w)


def test_a_program_file_keeps_names_that_json_allows_and_utf8_does_not(tmp_path):
    """Lone surrogates load from a Program file's JSON; C gets their bytes."""
    program = build_program(_conv_chain(2))
    names = ['\ud800', '\udfff*/', 'a\x00b', '\U0010ffff', '??/', '\\', '*/', 'y']
    save_program(renamed(program, names * 4), tmp_path / 'p.npz')
    loaded = load_program(tmp_path / 'p.npz')
    assert loaded.outputs[0].name == names[1]
    assert_names_only_in_literals(loaded, renamed(program, ['v%d' % k for k in range(32)]),
                                  tmp_path)


def test_instruction_comments_give_index_operator_and_registers(tmp_path):
    program = build_program(_conv_chain(2))
    emit_c(program, tmp_path)
    comments = re.findall(r'/\* (\d+): (.*) \*/', (tmp_path / 'model.c').read_text())
    assert comments == [('0', '%2 = Conv(%0, %1)'), ('1', '%3 = Neg(%2)'),
                        ('2', '%4 = Neg(%3)')], comments


# -- the payloads, compiled and run ------------------------------------------------

def _payload_model(marker):
    """The chain with a payload in every name: input, output, intermediate,
    initializer, node, and Conv's auto_pad (which the NumPy VM and the C
    backend read as NOTSET, the same window function deciding)."""
    model = _conv_chain(2)
    names = {n: payload(marker, k) for k, n in enumerate(['x', 'w', 'c', 'h0', 'h1'])}
    graph = model.graph
    for v in list(graph.input) + list(graph.output) + list(graph.initializer):
        v.name = names[v.name]
    for k, node in enumerate(graph.node):
        node.input[:] = [names[n] for n in node.input]
        node.output[:] = [names[n] for n in node.output]
        node.name = payload(marker, 10 + k)
    graph.node[0].attribute[0].s = payload(marker, 20).encode()
    return model


@needs_cc
@pytest.mark.slow  # make builds every kernel at -O3 (about 10 s)
def test_payloads_in_names_run_nothing_anywhere(tmp_path, monkeypatch, native_cache):
    """emit-c and make, run --onnx/--program --backend native, and the
    Executor: the results are the VM's and the payload never runs."""
    monkeypatch.setenv('CHAINER_COMPILER_CACHE', str(native_cache))
    marker = tmp_path / 'ran'
    model = _payload_model(marker)
    onnx.save(model, tmp_path / 'm.onnx')
    program = build_program(model)
    save_program(program, tmp_path / 'p.npz')
    x = numpy.arange(9, dtype=numpy.float32).reshape(1, 1, 3, 3)
    want = Executor(program).run_positional([x])
    numpy.testing.assert_array_equal(want[1], 2 * x)
    numpy.testing.assert_array_equal(Executor(program, backend='native').run_positional([x])[1],
                                     want[1])
    for source in (['--onnx', str(tmp_path / 'm.onnx')],
                   ['--program', str(tmp_path / 'p.npz')]):
        assert cli_main(['run', '--backend', 'native'] + source) == 0
    assert cli_main(['emit-c', str(tmp_path / 'm.onnx'), '-o', str(tmp_path / 'c')]) == 0
    done = subprocess.run(['make', '-C', str(tmp_path / 'c')], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'warning' not in done.stderr
    assert not marker.exists()


# -- fuzzing ---------------------------------------------------------------------------

#: Text biased to what breaks C: the sequences above, and any character.
_TEXT = st.lists(st.sampled_from([s for s in SEQUENCES if len(s) < 10]) | st.characters(),
                 max_size=6).map(''.join)
#: Compiled examples are slow (gcc): a few in the default profile, more in
#: the thorough one (tests/conftest.py).
_COMPILED = settings(max_examples=max(8, settings.default.max_examples // 25))


@settings(max_examples=settings.default.max_examples // 2)
@given(names=st.lists(_TEXT, min_size=1, max_size=12), weights=st.sampled_from(['embed', 'file']))
def test_fuzzed_names_and_string_attributes_stay_in_literals(names, weights, tmp_path_factory):
    """Every name and string attribute from ``names`` changes the C only in
    its string literals (the Program path: any str, as a Program file's JSON
    holds)."""
    base = build_program(_conv_chain(2))
    assert_names_only_in_literals(renamed(base, names), renamed(base, ['n']),
                                  tmp_path_factory.mktemp('fuzz'), weights=weights)


@needs_cc
@_COMPILED
@given(values=st.tuples(_TEXT, _TEXT, _TEXT).map(  # distinct, none empty, none 'w'
    lambda names: ['%d%s' % (k, name) for k, name in enumerate(names)]),
       nodes=st.lists(_TEXT, min_size=2, max_size=2),
       auto_pad=st.sampled_from(['NOTSET', 'VALID', 'SAME_UPPER', 'SAME_LOWER']) | _TEXT)
@pytest.mark.native_build
def test_fuzzed_names_compile_to_the_vms_result_or_a_clean_refusal(values, nodes, auto_pad,
                                                                  native_cache):
    """An ONNX model with these value names, node names and Conv auto_pad
    runs natively with the NumPy VM's result, or is refused with a project
    error."""
    x, h, y = values
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node('Conv', [x, 'w'], [h], name=nodes[0], auto_pad=auto_pad),
         helper.make_node('Relu', [h], [y], name=nodes[1])], 'fuzz',
        [helper.make_tensor_value_info(x, f32, [1, 1, 4, 4])],
        [helper.make_tensor_value_info(y, f32, ['n', 'c', 'h', 'w'])],
        [numpy_helper.from_array(numpy.linspace(-1, 1, 9, dtype=numpy.float32)
                                 .reshape(1, 1, 3, 3), 'w')])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])
    x_value = numpy.linspace(-2, 2, 16, dtype=numpy.float32).reshape(1, 1, 4, 4)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('CHAINER_COMPILER_CACHE', str(native_cache))
        try:
            program = build_program(model)
            got = Executor(program, backend='native').run_positional([x_value])
        except (InvalidModelError, UnsupportedOperatorsError, RuntimeVMError) as e:
            event('refused: %s' % type(e).__name__)
            return
    want = Executor(program).run_positional([x_value])
    numpy.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


# -- model names ----------------------------------------------------------------------

@pytest.mark.parametrize('name', ['Makefile', 'makefile', 'GNUmakefile', 'clean', 'all', 'MAIN',
                                  'CCN_COMMON', 'ccn', 'Ccn_array', 'pthread', 'pthread_attr',
                                  'timer', 'sem', '_STDINT', '__x', '9lives', 'a-b', 'a b',
                                  'é', '', 'x' * 65])
def test_model_names_that_would_not_build_are_refused(tmp_path, capsys, mlp_model, name):
    with pytest.raises(NativeEmitError, match='model name'):
        check_model_name(name)
    onnx.save(mlp_model, tmp_path / 'm.onnx')
    assert cli_main(['emit-c', str(tmp_path / 'm.onnx'), '-o', str(tmp_path / 'c'),
                     '--name', name]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / 'c').exists()


@pytest.mark.parametrize('name', ['model', 'm', 'Model2', 'semantic_seg', 'ccnet', 'x' * 64,
                                  'int', 'mainly', 'allx'])
def test_model_names_that_build_are_accepted(name):
    check_model_name(name)


# -- files in the output folder ----------------------------------------------------------

def test_a_symbolic_link_in_the_output_folder_is_refused_and_left_alone(tmp_path, capsys,
                                                                       mlp_model):
    onnx.save(mlp_model, tmp_path / 'm.onnx')
    victim = tmp_path / 'victim'
    victim.write_text('keep me')
    (tmp_path / 'c').mkdir()
    (tmp_path / 'c' / 'model.c').symlink_to(victim)
    assert cli_main(['emit-c', str(tmp_path / 'm.onnx'), '-o', str(tmp_path / 'c')]) == 2
    assert 'symbolic link' in capsys.readouterr().err
    assert victim.read_text() == 'keep me'
    assert os.listdir(tmp_path / 'c') == ['model.c']  # nothing else written


def test_a_hard_link_in_the_output_folder_is_replaced_not_written_through(tmp_path, mlp_model):
    victim = tmp_path / 'victim'
    victim.write_text('keep me')
    (tmp_path / 'c').mkdir()
    os.link(victim, tmp_path / 'c' / 'model.h')
    emit_c(build_program(mlp_model), tmp_path / 'c')
    assert victim.read_text() == 'keep me'
    assert 'model_run' in (tmp_path / 'c' / 'model.h').read_text()


@pytest.mark.parametrize('where', ['Makefile', 'model_weights.bin', 'main.c', 'hard link'])
def test_emit_c_refuses_to_overwrite_its_own_input(tmp_path, capsys, mlp_model, where):
    (tmp_path / 'c').mkdir()
    model = tmp_path / 'c' / ('model.c' if where == 'hard link' else where)
    onnx.save(mlp_model, model)
    argv = ['emit-c', str(model), '-o', str(tmp_path / 'c'), '--weights', 'file']
    if where == 'hard link':
        os.link(model, tmp_path / 'm.onnx')
        argv[1] = str(tmp_path / 'm.onnx')
    before = model.read_bytes()
    assert cli_main(argv) == 2
    assert 'would overwrite' in capsys.readouterr().err
    assert model.read_bytes() == before
