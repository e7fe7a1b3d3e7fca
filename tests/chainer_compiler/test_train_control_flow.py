"""compile_onnx trains through Loop, If and sequences: hand-written ONNX
files of the form the ch2o translator writes, whose parameter gradients
must equal Chainer's own on the same computation done eagerly."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import pytest
from onnx import TensorProto, helper

import chainer_compiler
from chainer_compiler.runtime import InputValidationError

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
B, H = 2, 3


class Recurrent(chainer.Chain):
    """h <- tanh(h W) T times, then h W if ``project`` else 2 h."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.W = chainer.Parameter(
                numpy.random.RandomState(0).uniform(-0.8, 0.8, (H, H)).astype(numpy.float32))

    def forward(self, h, steps, project):
        for _ in range(int(steps)):
            h = F.tanh(F.matmul(h, self.W))
        y = F.matmul(h, self.W) if bool(project) else h * 2
        return F.sum(y * y)


def tensor(name, elem=F32, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def loop_body():
    """h_out = tanh(h_in W): the body the ch2o translator writes for the loop."""
    return helper.make_graph(
        [helper.make_node('Identity', ['cond_in'], ['cond_out']),
         helper.make_node('MatMul', ['h_in', '/W'], ['hw']),
         helper.make_node('Tanh', ['hw'], ['h_out'])],
        'loop_body',
        [tensor('i', I64, []), tensor('cond_in', BOOL, []), tensor('h_in', F32, [B, H])],
        [tensor('cond_out', BOOL, []), tensor('h_out', F32, [B, H])])


def if_node(source, output):
    """output = source W if project else 2 source."""
    then_branch = helper.make_graph([helper.make_node('MatMul', [source, '/W'], ['projected'])],
                                    'then', [], [tensor('projected', F32, [B, H])])
    else_branch = helper.make_graph([helper.make_node('Add', [source, source], ['doubled'])],
                                    'else', [], [tensor('doubled', F32, [B, H])])
    return helper.make_node('If', ['input_2'], [output], then_branch=then_branch,
                            else_branch=else_branch)


def write_model(path, nodes, inputs, extra_outputs=()):
    """The file: nodes computing 'y', the loss sum(y * y) as output 0."""
    W = helper.make_tensor('/W', F32, [H, H], numpy.zeros((H, H), numpy.float32).ravel())
    graph = helper.make_graph(
        nodes + [helper.make_node('Mul', ['y', 'y'], ['yy']),
                 helper.make_node('ReduceSum', ['yy'], ['loss'], keepdims=0)],
        'recurrent', inputs, [tensor('loss', F32, [])] + list(extra_outputs), [W])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def recurrent_file(path):
    return write_model(path, [
        helper.make_node('Loop', ['input_1', '', 'input_0'], ['h'], body=loop_body()),
        if_node('h', 'y')],
        [tensor('input_0', F32, [B, H]), tensor('input_1', I64, []), tensor('input_2', BOOL, [])])


def eager_gradients(model, args):
    """The loss and the gradients of W and of the first argument, by Chainer."""
    model.cleargrads()
    x = chainer.Variable(args[0].copy())
    loss = model(x, *args[1:])
    loss.backward()
    return float(loss.array), model.W.grad.copy(), x.grad


@pytest.mark.parametrize('steps, project', [(3, True), (3, False), (1, True), (0, True)])
def test_parameter_gradient_through_loop_and_if(tmp_path, steps, project):
    model = Recurrent()
    compiled = chainer_compiler.compile_onnx(model, recurrent_file(tmp_path / 'm.onnx'), 'ch2o')
    h = numpy.random.RandomState(1).uniform(-1, 1, (B, H)).astype(numpy.float32)
    args = (h, numpy.asarray(steps, numpy.int64), numpy.asarray(project))
    want_loss, want_gw, want_gx = eager_gradients(model, args)
    model.cleargrads()
    x = chainer.Variable(h.copy())
    loss = compiled(x, *args[1:])
    loss.backward()
    numpy.testing.assert_allclose(float(loss.array), want_loss, rtol=1e-5)
    numpy.testing.assert_allclose(model.W.grad, want_gw, rtol=1e-5, atol=1e-7)
    numpy.testing.assert_allclose(x.grad, want_gx, rtol=1e-5, atol=1e-7)


def test_one_file_trains_for_several_trip_counts(tmp_path):
    # One compiled program, run for T = 4 then 2: an SGD step agrees with Chainer's.
    model, reference = Recurrent(), Recurrent()
    compiled = chainer_compiler.compile_onnx(model, recurrent_file(tmp_path / 'm.onnx'), 'ch2o')
    optimizer, expected = chainer.optimizers.SGD(0.1), chainer.optimizers.SGD(0.1)
    optimizer.setup(compiled)
    expected.setup(reference)
    h = numpy.random.RandomState(2).uniform(-1, 1, (B, H)).astype(numpy.float32)
    for steps in (4, 2):
        args = (h, numpy.asarray(steps, numpy.int64), numpy.asarray(True))
        optimizer.update(compiled, *args)
        expected.update(reference, *args)
        numpy.testing.assert_allclose(model.W.array, reference.W.array, rtol=1e-5, atol=1e-7)
    assert not numpy.array_equal(model.W.array, Recurrent().W.array)


class ListRecurrent(Recurrent):
    """for x in xs: h <- tanh(h W + x), appended to a list, the loss summed
    in the loop; returns the loss and the list."""

    def forward(self, h, xs):
        hs, loss = [], 0
        for x in xs:
            h = F.tanh(F.matmul(h, self.W) + x)
            hs.append(h)
            loss += F.sum(h * h)
        return loss, hs


def list_recurrent_file(path):
    body = helper.make_graph(
        [helper.make_node('SequenceAt', ['input_1', 'i'], ['x']),
         helper.make_node('MatMul', ['h_in', '/W'], ['hw']),
         helper.make_node('Add', ['hw', 'x'], ['z']),
         helper.make_node('Tanh', ['z'], ['h_out']),
         helper.make_node('SequenceInsert', ['hs_in', 'h_out'], ['hs_out']),
         helper.make_node('Mul', ['h_out', 'h_out'], ['hh']),
         helper.make_node('ReduceSum', ['hh'], ['step_loss'], keepdims=0),
         helper.make_node('Add', ['loss_in', 'step_loss'], ['loss_out']),
         helper.make_node('Identity', ['cond_in'], ['cond_out'])],
        'loop_body', [tensor('i', I64, []), tensor('cond_in', BOOL, []),
                      tensor('h_in', F32, [B, H]), tensor('loss_in', F32, []),
                      helper.make_tensor_sequence_value_info('hs_in', F32, [B, H])],
        [tensor('cond_out', BOOL, []), tensor('h_out', F32, [B, H]), tensor('loss_out', F32, []),
         helper.make_tensor_sequence_value_info('hs_out', F32, [B, H])])
    W = helper.make_tensor('/W', F32, [H, H], numpy.zeros((H, H), numpy.float32).ravel())
    zero = helper.make_tensor('zero', F32, [], [0.0])
    graph = helper.make_graph(
        [helper.make_node('SequenceLength', ['input_1'], ['n']),
         helper.make_node('SequenceEmpty', [], ['hs0'], dtype=F32),
         helper.make_node('Loop', ['n', '', 'input_0', 'zero', 'hs0'], ['h', 'loss', 'hs'],
                          body=body)],
        'list_recurrent',
        [tensor('input_0', F32, [B, H]),
         helper.make_tensor_sequence_value_info('input_1', F32, [B, H])],
        [tensor('loss', F32, []), helper.make_tensor_sequence_value_info('hs', F32, [B, H])],
        [W, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def test_lists_in_and_out(tmp_path):
    # A list input and a list output, element by element, with gradients.
    model = ListRecurrent()
    compiled = chainer_compiler.compile_onnx(model, list_recurrent_file(tmp_path / 'l.onnx'),
                                             'ch2o')
    rng = numpy.random.RandomState(3)
    h0 = rng.uniform(-1, 1, (B, H)).astype(numpy.float32)
    xs = [rng.uniform(-1, 1, (B, H)).astype(numpy.float32) for _ in range(3)]
    results = []
    for run in (model, compiled):
        model.cleargrads()
        h = chainer.Variable(h0.copy())
        x_vars = [chainer.Variable(x.copy()) for x in xs]
        loss, hs = run(h, x_vars)
        assert isinstance(hs, list) and len(hs) == 3
        # The list output carries gradients back too.
        (loss + F.sum(hs[1] * 3)).backward()
        results.append([loss.array, *[v.array for v in hs], model.W.grad.copy(), h.grad,
                        *[x.grad for x in x_vars]])
    for got, want in zip(results[1], results[0]):
        numpy.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    with chainer.using_config('train', False):
        loss, hs = compiled(h0, xs)
    numpy.testing.assert_allclose(hs[2].array, results[0][3], rtol=1e-5, atol=1e-7)


class LinearLoop(chainer.Chain):
    """A link applied n times, n an argument: a Loop with a run-time trip count."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l = L.Linear(H, H, initialW=chainer.initializers.Uniform(0.8))

    def forward(self, h, n):
        for _ in range(n):
            h = F.tanh(self.l(h))
        return F.sum(h * h)


class ListLoop(LinearLoop):
    """The states go to a list in one loop, summed up in another."""

    def forward(self, h, n):
        hs = []
        for _ in range(n):
            h = F.tanh(self.l(h))
            hs.append(h)
        loss = 0
        for y in hs:
            loss += F.sum(y * y)
        return loss


# (With no iteration ListLoop's eager loss is the int 0: nothing to compare.)
@pytest.mark.parametrize('cls, trip_counts', [(LinearLoop, (0, 2, 5)), (ListLoop, (1, 2, 5))])
def test_a_ch2o_export_of_a_for_loop_trains(tmp_path, cls, trip_counts):
    model = cls()
    h = numpy.random.RandomState(4).uniform(-1, 1, (B, H)).astype(numpy.float32)
    path = str(tmp_path / 'loop.onnx')
    chainer_compiler.export(model, [h, 2], path, translator='ch2o')
    assert 'Loop' in [n.op_type for n in onnx.load(path).graph.node]
    compiled = chainer_compiler.compile_onnx(model, path, 'ch2o')
    for n in trip_counts:
        results = []
        for run, steps in ((model, n), (compiled, numpy.asarray(n, numpy.int64))):
            model.cleargrads()
            x = chainer.Variable(h.copy())
            loss = run(x, steps)
            loss.backward()
            # With no iteration Chainer leaves the link's gradients unset (zero).
            grads = [numpy.zeros_like(p.array) if p.grad is None else p.grad.copy()
                     for p in (model.l.W, model.l.b)]
            results.append([loss.array, *grads, x.grad])
        for got, want in zip(*results[::-1]):
            numpy.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_a_ch2o_model_takes_the_python_scalar_it_was_exported_with(tmp_path):
    model = LinearLoop()
    h = numpy.random.RandomState(5).uniform(-1, 1, (B, H)).astype(numpy.float32)
    path = str(tmp_path / 'loop.onnx')
    chainer_compiler.export(model, [h, 2], path, translator='ch2o')
    compiled = chainer_compiler.compile_onnx(model, path, 'ch2o')
    for train in (True, False):
        with chainer.using_config('train', train):
            want = compiled(h, numpy.asarray(3, numpy.int64)).array
            for steps in (3, numpy.int32(3), numpy.int64(3)):
                numpy.testing.assert_array_equal(compiled(h, steps).array, want)
            for wrong in (2.5, True, 2 ** 70):
                with pytest.raises(InputValidationError, match='which int64 cannot hold'):
                    compiled(h, wrong)
