"""ch2o: translate the Python source of a Chainer model's ``forward`` to ONNX.

The translator walks the AST of ``forward`` (and of every method, function
and lambda it calls, inlined) the way Python would run it, but on
``values``: what is known at export time is computed at export time
(constants fold, ``if`` on a constant takes one branch, loops of a known
trip count are unrolled), and what depends on the inputs becomes ONNX
nodes: ``If`` for a condition on a tensor, ``Loop`` for a trip count or a
``while`` condition known only at run time, sequence ops for lists whose
length is only known at run time.

``break``, ``continue`` and ``return`` set flags in the frame's bindings
(``$broke``, ``$continued``, ``$returned`` and the value ``$ret``).  While a
flag is a constant the translator simply stops translating the statements
it skips; once a flag depends on the inputs, the statements after it are
translated inside an ``If`` on it, so every exit works inside dynamic
branches and loops too.
"""
import ast
import builtins
import contextlib
import inspect
import itertools
import types

import chainer
import numpy
from onnx import helper

from . import control_flow as cf
from .functions import call_chainer
from .indexing import SliceValue, index_tensor, slice_sequence
from .numpy_calls import call_numpy, tensor_attribute, tensor_method
from .operators import binary, cast, compare, truth, unary
from .scope import Scope, Translation
from .source import function_ast
from .values import (
    Const,
    MaybeNone,
    PyDict,
    PyList,
    PyTuple,
    Sequence,
    Tensor,
    TranslationError,
    Value,
    constant_value,
    is_constant,
    recording,
)

RETURNED, RET, BROKE, CONTINUED = '$returned', '$ret', '$broke', '$continued'
FLAGS = (RETURNED, BROKE, CONTINUED)

#: Loops whose trip count is known at export time (``for`` over a list, a
#: constant ``range``, a ``while`` on a constant condition) are unrolled: one
#: copy of the body per iteration.  Past this many iterations in all, in one
#: export, translation stops (a million-step constant loop would otherwise
#: write a million copies); a single iterable known at export time may not
#: have more items either.
MAX_UNROLLED_ITERATIONS = 100000

#: Inlined calls (methods, functions, lambdas) nest at most this deep: a
#: recursion that the export-time constants do not end stops here, well
#: before Python's own recursion limit.
MAX_CALL_DEPTH = 64

#: ONNX If and Loop bodies nest at most this deep.  Each level nests three
#: protobuf messages (node, attribute, graph), and protobuf readers refuse
#: files nested more than 100 messages deep (at about 31 levels a file
#: cannot be loaded); the margin leaves room for the helper Loops that list
#: slicing and sequence functions add inside a body.
MAX_SUBGRAPH_DEPTH = 24

#: What hitting Python's recursion limit inside translation is reported as.
_TOO_DEEP = ('nested too deeply to translate within Python\'s recursion limit (too many '
             'operators in an expression, or statements, calls, branches or lists nested too '
             'deep)')


class RangeValue(Value):
    """``range(start, stop, step)`` with a bound known only at run time."""
    kind = 'a range'

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step


class ZipValue(Value):
    """``zip(...)`` or ``enumerate(...)`` (a zip with a counting range)."""
    kind = 'a zip'

    def __init__(self, iterables):
        self.iterables = iterables


class Closure(Value):
    """A lambda or a function defined inside translated code."""
    kind = 'a function'

    def __init__(self, node, frame):
        self.node, self.frame = node, frame


class BoundMethod(Value):
    """``obj.name`` where ``obj`` is a list, dict, sequence or tensor."""
    kind = 'a method'

    def __init__(self, target, name, target_node):
        self.target, self.name, self.target_node = target, name, target_node


class PyObject(Value):
    """An instance of a plain Python class (not a Link) constructed in
    translated code: its methods are inlined with ``self`` bound to it, and
    its attributes are Values.  ``scope`` is where it was made: the
    attributes live on the object, not among the names that If and Loop
    merge across paths, so setting one from the body of a branch or loop
    the object was made outside of is refused."""
    kind = 'an object'

    def __init__(self, cls, scope):
        self.cls, self.scope, self.attrs = cls, scope, {}


class Frame:
    """One activation of a translated function: its bindings, globals and
    source file."""

    def __init__(self, env, globals_, filename):
        self.env = env
        self.globals = globals_
        self.filename = filename


def fork(env):
    """A copy of ``env`` whose lists and dicts are copies too (a branch that
    appends to a list must not change the other branch's)."""
    memo = {}

    def copy(value):
        if isinstance(value, (PyList, PyDict, PyTuple)):
            if id(value) not in memo:
                if isinstance(value, PyList):
                    memo[id(value)] = PyList([copy(v) for v in value.items])
                elif isinstance(value, PyTuple):
                    memo[id(value)] = PyTuple(tuple(copy(v) for v in value.items))
                else:
                    memo[id(value)] = PyDict({k: copy(v) for k, v in value.items.items()})
            return memo[id(value)]
        return value
    return {k: copy(v) for k, v in env.items()}


def _is_chainer_builtin(obj):
    return type(obj).__module__.split('.')[0] == 'chainer'


class Translator:
    """Translates statements and expressions into the current Scope."""

    def __init__(self, scope):
        self.scope = scope
        self.comprehensions = 0  # numbers the hidden list of each comprehension
        #: the env key of an attribute assigned in translated code -> (object, name)
        self.attributes = {}
        self.frames = []  # the frames of the inlined calls under way, innermost last
        #: id of a list held by a PyObject's attribute -> (the list, the PyObject)
        self.held_lists = {}
        self.unrolled = 0  # loop iterations unrolled so far (MAX_UNROLLED_ITERATIONS)

    # -- attributes assigned in translated code -------------------------------
    def attribute_key(self, obj, attr):
        """The env key binding ``obj.attr`` once translated code assigns it
        (``self.h = ...``).  Such a binding is a local of the translation:
        it passes from a call to its caller and on to later calls, and
        merges across branches and loop iterations like a name."""
        return 'self.%s (%s at %#x)' % (attr, type(obj).__name__, id(obj))

    def assign_attribute(self, frame, obj, attr, value):
        """``obj.attr = value`` for an object known at export time."""
        key = self.attribute_key(obj, attr)
        self.attributes[key] = (obj, attr)
        frame.env[key] = value

    def binding(self, env, name):
        """``env[name]``; for an attribute no path of ``env`` assigned yet,
        the object's own value (what a loop starts from); else None."""
        value = env.get(name)
        if (value is None or isinstance(value, cf.Undefined)) and name in self.attributes:
            obj, attr = self.attributes[name]
            if hasattr(obj, attr):
                return self.wrap(getattr(obj, attr))
        return value

    def pass_attributes(self, source, target):
        """Copy the attribute bindings of env ``source`` into env ``target``
        (into a call, and back to its caller)."""
        target.update((k, v) for k, v in source.items() if k in self.attributes)

    # -- sites and errors ------------------------------------------------------
    @staticmethod
    def site(frame, node):
        return '%s:%d' % (frame.filename, getattr(node, 'lineno', 0))

    def error(self, frame, node, message):
        return TranslationError(self.site(frame, node), message)

    # -- limits ----------------------------------------------------------------
    def count_unrolled(self, frame, node, iterations):
        """Count ``iterations`` more loop iterations unrolled at export time,
        before translating them; refuse past MAX_UNROLLED_ITERATIONS."""
        self.unrolled += iterations
        if self.unrolled > MAX_UNROLLED_ITERATIONS:
            raise self.error(frame, node, 'loops whose trip count is known at export time '
                             'unroll to more than %d iterations in all (one copy of the body '
                             'each); make the trip count an argument of forward to get an ONNX '
                             'Loop' % MAX_UNROLLED_ITERATIONS)

    def check_subgraph_depth(self, site):
        """Refuse an If or Loop whose body would nest deeper than
        MAX_SUBGRAPH_DEPTH, before translating it."""
        depth, scope = 1, self.scope
        while scope.parent is not None:
            depth, scope = depth + 1, scope.parent
        if depth > MAX_SUBGRAPH_DEPTH:
            raise TranslationError(site, 'branches and loops that depend on the inputs (each an '
                                   'ONNX If or Loop; an exit under one adds one more per '
                                   'statement after it) nest more than %d deep'
                                   % MAX_SUBGRAPH_DEPTH)

    # -- functions ----------------------------------------------------------
    def call_function(self, fn, args, kwargs, site, self_value=None):
        """Inline Python function ``fn`` (a function, or a Closure) called
        with Values ``args``/``kwargs``; return its result."""
        if len(self.frames) >= MAX_CALL_DEPTH:
            raise TranslationError(site, 'calls nest more than %d deep (a recursion that the '
                                   'constants known at export time do not end?)'
                                   % MAX_CALL_DEPTH)
        if isinstance(fn, Closure):
            node, frame0 = fn.node, fn.frame
            globals_, filename = frame0.globals, frame0.filename
            env = dict(frame0.env)
        elif not isinstance(fn, types.FunctionType):
            raise TranslationError(site, '%s is a %s, not a Python function: ch2o translates '
                                   'Python source' % (_name_of(fn), type(fn).__name__))
        else:
            node, filename = function_ast(fn)
            globals_ = dict(fn.__globals__)
            if fn.__closure__:
                globals_.update((name, cell.cell_contents) for name, cell in
                                zip(fn.__code__.co_freevars, fn.__closure__))
            env = {}
        params = node.args
        if params.posonlyargs:
            raise TranslationError('%s:%d' % (filename, node.lineno),
                                   'positional-only parameters are not supported')
        names = [a.arg for a in params.args]
        values = list(args)
        if self_value is not None:
            values.insert(0, self_value)
        if len(values) > len(names) and not params.vararg:
            raise TranslationError(site, '%s takes %d arguments, %d given'
                                   % (getattr(node, 'name', 'lambda'), len(names), len(values)))
        frame = Frame(env, globals_, filename)
        bound = dict(zip(names, values))
        if params.vararg:
            bound[params.vararg.arg] = PyTuple(tuple(values[len(names):]))
        extra = {}
        for key, value in kwargs.items():
            if key in bound:
                raise TranslationError(site, 'repeated argument %r' % key)
            if key in names or key in [a.arg for a in params.kwonlyargs]:
                bound[key] = value
            elif params.kwarg:
                extra[key] = value
            else:
                raise TranslationError(site, 'unexpected keyword argument %r' % key)
        if params.kwarg:
            bound[params.kwarg.arg] = PyDict(extra)
        for a, default in zip(params.kwonlyargs, params.kw_defaults):
            if a.arg not in bound and default is not None:
                bound[a.arg] = self.expr(frame, default) if isinstance(fn, Closure) else \
                    Const(fn.__kwdefaults__[a.arg])
        defaults = params.defaults
        for name, default in zip(names[len(names) - len(defaults):], defaults):
            if name not in bound:
                bound[name] = self.expr(frame, default) if isinstance(fn, Closure) else \
                    Const(fn.__defaults__[list(defaults).index(default)])
        missing = [n for n in names if n not in bound]
        if missing:
            raise TranslationError(site, 'missing argument(s) %s' % ', '.join(missing))
        env.update(bound)
        caller = self.frames[-1] if self.frames else None
        if caller is not None:
            self.pass_attributes(caller.env, env)
        self.frames.append(frame)
        try:
            result = self.run_body(frame, node)
        finally:
            self.frames.pop()
        if caller is not None:
            self.pass_attributes(frame.env, caller.env)
        return result

    def run_body(self, frame, node):
        """The result of the function or lambda AST ``node`` run in
        ``frame`` (its arguments bound)."""
        env, filename = frame.env, frame.filename
        if isinstance(node, ast.Lambda):
            return self.expr(frame, node.body)
        env[RETURNED] = Const(False)
        env[BROKE] = env[CONTINUED] = Const(False)
        self.block(frame, node.body)
        returned = env_get(frame, RETURNED)
        if isinstance(returned, Tensor) and not _always_returns(node.body):
            raise TranslationError('%s:%d' % (filename, node.lineno),
                                   '%s returns a value on some paths and falls off its end '
                                   '(returning None) on others' % node.name)
        return frame.env.get(RET, Const(None))

    # -- statements ---------------------------------------------------------
    def block(self, frame, stmts):
        """Translate ``stmts``; statements after an exit that depends on the
        inputs are translated inside an If on it."""
        for i, stmt in enumerate(stmts):
            self.stmt(frame, stmt)
            exited = self.exited(frame)
            if isinstance(exited, Const):
                if exited.value:
                    return
                continue
            rest = stmts[i + 1:]
            if rest:
                self.dynamic_if(frame, exited, lambda: None,
                                lambda rest=rest: self.block(frame, rest),
                                self.site(frame, rest[0]))
            return

    def exited(self, frame, flags=FLAGS):
        """Whether any of ``flags`` is set: a Const, or a bool Tensor."""
        result = Const(False)
        for flag in flags:
            value = frame.env.get(flag, Const(False))
            if isinstance(value, Const):
                if value.value:
                    return Const(True)
                continue
            if isinstance(result, Const):
                result = value
            else:
                result = self.scope.emit('Or', [result, value], result.example | value.example)
        return result

    def stmt(self, frame, node):
        method = getattr(self, 'stmt_' + type(node).__name__, None)
        if method is None:
            raise self.error(frame, node, '%s statements are not supported'
                             % _construct(node))
        try:
            method(frame, node)
        except RecursionError:
            raise self.error(frame, node, _TOO_DEEP) from None

    def stmt_Expr(self, frame, node):
        if isinstance(node.value, ast.Constant):
            return  # a docstring
        self.expr(frame, node.value)

    def stmt_Pass(self, frame, node):
        return

    def stmt_Assert(self, frame, node):
        return  # assertions check the export-time run; the graph has none

    def stmt_Assign(self, frame, node):
        value = self.expr(frame, node.value)
        for target in node.targets:
            self.assign(frame, target, value)

    def stmt_AnnAssign(self, frame, node):
        if node.value is not None:
            self.assign(frame, node.target, self.expr(frame, node.value))

    def stmt_AugAssign(self, frame, node):
        current = self.expr(frame, node.target)
        value = self.expr(frame, node.value)
        if isinstance(current, PyList) and isinstance(node.op, ast.Add):
            current.items.extend(self.items_of(frame, node, value))  # in place, as Python
            return
        self.assign(frame, node.target, binary(self.scope, node.op, _operand(current),
                                               _operand(value), self.site(frame, node)))

    def stmt_Delete(self, frame, node):
        for target in node.targets:
            if not isinstance(target, ast.Name):
                raise self.error(frame, node, 'del of anything but a name is not supported')
            frame.env.pop(target.id, None)

    def stmt_Return(self, frame, node):
        frame.env[RET] = Const(None) if node.value is None else self.expr(frame, node.value)
        frame.env[RETURNED] = Const(True)

    def stmt_Break(self, frame, node):
        frame.env[BROKE] = Const(True)

    def stmt_Continue(self, frame, node):
        frame.env[CONTINUED] = Const(True)

    def stmt_Raise(self, frame, node):
        raise self.error(frame, node, 'raise on a path that the export-time constants do not '
                         'rule out')

    def stmt_FunctionDef(self, frame, node):
        if node.decorator_list:
            raise self.error(frame, node, 'decorated local functions are not supported')
        frame.env[node.name] = Closure(node, frame)

    def stmt_If(self, frame, node):
        cond = truth(self.scope, self.expr(frame, node.test), self.site(frame, node.test))
        if isinstance(cond, Const):
            self.block(frame, node.body if cond.value else node.orelse)
            return
        then_value, else_value = self.narrowed(frame, node.test)

        def branch(stmts, narrowed):
            def run():
                if narrowed is not None:
                    self.assign(frame, node.test.left, narrowed)
                self.block(frame, stmts)
            return run
        self.dynamic_if(frame, cond, branch(node.body, then_value),
                        branch(node.orelse, else_value), self.site(frame, node))

    def narrowed(self, frame, test):
        """For ``if x is None`` / ``if x is not None`` on a MaybeNone ``x``
        (a name or attribute), what ``x`` is in the then and else branches:
        None in one, its tensor in the other (so ``F.reshape(x, ...)`` under
        ``if x is not None`` calls Chainer with the tensor only).  (None,
        None) for any other test."""
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and
                isinstance(test.ops[0], (ast.Is, ast.IsNot)) and
                isinstance(test.comparators[0], ast.Constant) and
                test.comparators[0].value is None and
                isinstance(test.left, (ast.Name, ast.Attribute))):
            return None, None
        value = self.expr(frame, test.left)
        if not isinstance(value, MaybeNone):
            return None, None
        if isinstance(test.ops[0], ast.Is):
            return Const(None), value.tensor
        return value.tensor, Const(None)

    def stmt_With(self, frame, node):
        with contextlib.ExitStack() as stack:
            for item in node.items:
                manager = self.expr(frame, item.context_expr)
                if not isinstance(manager, Const) or not _is_config_manager(manager.value):
                    raise self.error(frame, item.context_expr,
                                     'with: only chainer.using_config(...), '
                                     'chainer.no_backprop_mode() and force_backprop_mode() are '
                                     'supported')
                result = stack.enter_context(manager.value)
                if item.optional_vars is not None:
                    self.assign(frame, item.optional_vars, Const(result))
            self.block(frame, node.body)

    def stmt_For(self, frame, node):
        iterable = self.expr(frame, node.iter)
        site = self.site(frame, node)
        static = self.static_items(frame, node.iter, iterable)

        def bind(item):
            self.assign(frame, node.target, item)

        if static is not None:
            self.count_unrolled(frame, node, len(static))
            self.unrolled_loop(frame, [lambda item=item: bind(item) for item in static],
                               node.body, site)
        else:
            trip, getter = self.dynamic_iteration(frame, node.iter, iterable)
            self.dynamic_loop(frame, trip, None, lambda i: bind(getter(i)), node.body, site)
        self.loop_else(frame, node)

    def stmt_While(self, frame, node):
        """Unrolled while the condition is known at export time; from the
        first condition (or break) that depends on the inputs on, a Loop."""
        site = self.site(frame, node)
        outer = frame.env.get(BROKE, Const(False)), frame.env.get(CONTINUED, Const(False))
        frame.env[BROKE] = Const(False)
        while True:
            stop = self.exited(frame, (RETURNED, BROKE))
            if isinstance(stop, Const) and stop.value:
                break
            cond = truth(self.scope, self.expr(frame, node.test), self.site(frame, node.test))
            if not isinstance(stop, Const):
                go_on = self.scope.emit('Not', [stop], ~stop.example)
                cond = self.logical('And', go_on, cond, site)
            if isinstance(cond, Const):
                if not cond.value:
                    break
                self.count_unrolled(frame, node, 1)
                frame.env[CONTINUED] = Const(False)
                self.block(frame, node.body)
                continue
            frame.env[BROKE] = Const(False)
            self.dynamic_loop(frame, None, lambda: self.expr(frame, node.test),
                              lambda i: None, node.body, site, initial_cond=cond)
            break
        frame.env[BROKE], frame.env[CONTINUED] = outer
        self.loop_else(frame, node)

    def loop_else(self, frame, node):
        if node.orelse:
            raise self.error(frame, node, 'else clauses of loops are not supported')

    # -- loops --------------------------------------------------------------
    def unrolled_loop(self, frame, binders, body, site):
        """A loop of a trip count known at export time, one copy of ``body``
        per element (``binders`` bind the loop variables)."""
        outer = frame.env.get(BROKE, Const(False)), frame.env.get(CONTINUED, Const(False))
        frame.env[BROKE] = Const(False)
        self._unroll(frame, binders, body, site)
        frame.env[BROKE], frame.env[CONTINUED] = outer

    def _unroll(self, frame, binders, body, site):
        for k, bind in enumerate(binders):
            stop = self.exited(frame, (RETURNED, BROKE))
            if isinstance(stop, Const) and stop.value:
                return
            if not isinstance(stop, Const):
                rest = binders[k:]
                self.dynamic_if(frame, stop, lambda: None,
                                lambda rest=rest: self._unroll(frame, rest, body, site), site)
                return
            frame.env[CONTINUED] = Const(False)
            bind()
            self.block(frame, body)
        frame.env[CONTINUED] = Const(False)

    def static_items(self, frame, node, iterable):
        """The items of ``iterable`` when their number is known at export
        time (a list, tuple, dict, constant, ChainList, tensor of static
        first axis, zip of those), else None."""
        if isinstance(iterable, (PyList, PyTuple)):
            return list(iterable.items)
        if isinstance(iterable, PyDict):
            return [Const(k) for k in iterable.items]
        if isinstance(iterable, Const):
            try:
                values = list(itertools.islice(iterable.value, MAX_UNROLLED_ITERATIONS + 1))
            except TypeError:
                raise self.error(frame, node, '%s is not iterable'
                                 % type(iterable.value).__name__) from None
            self.check_static_length(frame, node, len(values))
            return [self.wrap(v) for v in values]
        if isinstance(iterable, Tensor):
            if not iterable.ndim:
                raise self.error(frame, node, 'iteration over a 0-d tensor')
            if iterable.shape[0] is None:
                return None
            self.check_static_length(frame, node, iterable.shape[0])
            return [self.tensor_item(iterable, Const(k)) for k in range(iterable.shape[0])]
        if isinstance(iterable, ZipValue):
            columns = [self.static_items(frame, node, it) for it in iterable.iterables]
            if any(c is None for c in columns):
                return None
            return [PyTuple(tuple(row)) for row in zip(*columns)]
        return None

    def check_static_length(self, frame, node, length):
        """Refuse an iterable known at export time of more items than
        MAX_UNROLLED_ITERATIONS, before making a value of each."""
        if length > MAX_UNROLLED_ITERATIONS:
            raise self.error(frame, node, 'more than %d items known at export time (ch2o makes '
                             'a value of each, and unrolls a loop over them); make the length an '
                             'argument of forward to get an ONNX Loop' % MAX_UNROLLED_ITERATIONS)

    def dynamic_iteration(self, frame, node, iterable):
        """(trip count Tensor, ``getter(iteration Tensor) -> item``) of an
        iterable whose length is known only at run time."""
        scope = self.scope
        site = self.site(frame, node)
        if isinstance(iterable, RangeValue):
            start, stop, step = iterable.start, iterable.stop, iterable.step
            if not isinstance(step, Const) or not isinstance(step.value, int) or not step.value:
                raise self.error(frame, node, 'range(): the step must be a non-zero constant')
            span = binary(scope, ast.Sub(), stop, start, site)
            if step.value > 0:
                span = binary(scope, ast.Add(), span, Const(step.value - 1), site)
            else:
                span = binary(scope, ast.Add(), span, Const(step.value + 1), site)
            trip = cast(scope, scope.as_tensor(binary(scope, ast.FloorDiv(), span, step, site),
                                               site), numpy.int64)
            trip = self.scope.emit('Max', [trip, scope.const_tensor(numpy.int64(0))],
                                   numpy.maximum(trip.example, 0))

            def range_item(i):
                offset = binary(self.scope, ast.Mult(), i, step, site)
                return binary(self.scope, ast.Add(), start, offset, site)
            return trip, range_item
        if isinstance(iterable, Sequence):
            trip = scope.emit('SequenceLength', [iterable.name],
                              numpy.int64(len(iterable.examples)))
            return trip, lambda i: self.sequence_item(iterable, i, site)
        if isinstance(iterable, Tensor):
            shape = scope.emit('Shape', [iterable], numpy.array(iterable.example.shape))
            trip = scope.emit('Gather', [shape, scope.const_tensor(numpy.int64(0))],
                              numpy.int64(iterable.example.shape[0]), axis=0)
            return trip, lambda i: self.tensor_item(iterable, i)
        if isinstance(iterable, ZipValue):
            parts = []
            for it in iterable.iterables:
                items = self.static_items(frame, node, it)
                if items is not None:
                    parts.append((Const(len(items)), _static_getter(self, it, items, site)))
                else:
                    parts.append(self.dynamic_iteration(frame, node, it))
            trip = None
            for count, _ in parts:
                count = cast(scope, scope.as_tensor(count, site), numpy.int64)
                trip = count if trip is None else scope.emit(
                    'Min', [trip, count], numpy.minimum(trip.example, count.example))
            return trip, lambda i: PyTuple(tuple(get(i) for _, get in parts))
        raise self.error(frame, node, 'iteration over %s is not supported' % iterable.kind)

    def dynamic_loop(self, frame, trip, cond_fn, bind, body, site, initial_cond=None):
        """An ONNX Loop running ``body`` ``trip`` times (None: until
        ``cond_fn()`` is false), binding the loop variables with
        ``bind(iteration Tensor)``.  Names the body rebinds are carried; the
        body is translated again until their specs stop changing."""
        self.check_subgraph_depth(site)
        outer = self.scope
        initial = frame.env
        specs = {}
        for _ in range(6):
            body_scope = outer.child()
            self.scope = body_scope
            env = fork(initial)
            iteration = Tensor(body_scope.fresh('iteration'), numpy.int64(0))
            cond_in = body_scope.fresh('cond_in')
            inputs = []
            for name, spec in specs.items():
                names = [body_scope.fresh('carried') for _ in cf.leaves(spec)]
                inputs.extend(cf.value_info(n, s) for n, s in zip(names, cf.leaves(spec)))
                env[name] = cf.unflatten(spec, iter(names), self.binding(initial, name))
            body_inputs = fork(env)  # a copy: the body may append to its lists
            env[BROKE] = env[CONTINUED] = Const(False)
            frame.env = env
            bind(iteration)
            self.block(frame, body)
            out = frame.env
            new_specs = {}
            for name, value in out.items():
                if name in (BROKE, CONTINUED) or isinstance(value, cf.Undefined):
                    continue
                before = body_inputs.get(name)
                if name in specs:
                    new_specs[name] = cf.merge(before, value, site, name) \
                        if not cf.unchanged(before, value) else specs[name]
                elif before is None or not cf.unchanged(before, value):
                    first = self.binding(initial, name)
                    new_specs[name] = cf.merge(first, value, site, name) \
                        if first is not None and not isinstance(first, cf.Undefined) \
                        else cf.spec_of(value)
            if new_specs == specs:
                break
            specs = {**specs, **new_specs}
        else:
            self.scope = outer
            raise TranslationError(site, 'the loop-carried values do not settle on one type')

        # the body's outputs: whether to go on, then the carried values
        self.scope = body_scope
        stop = self.exited(frame, (RETURNED, BROKE))
        go_on = Const(not stop.value) if isinstance(stop, Const) else \
            body_scope.emit('Not', [stop], ~stop.example)
        if cond_fn is not None and not (isinstance(go_on, Const) and not go_on.value):
            go_on = self.logical('And', go_on, truth(body_scope, cond_fn(), site), site)
        cond_out = body_scope.as_tensor(go_on, site)
        cond_out = body_scope.emit('Identity', [cast(body_scope, cond_out, numpy.bool_)],
                                   cond_out.example)
        outputs = [helper.make_tensor_value_info(cond_out.name, helper.np_dtype_to_tensor_dtype(
            numpy.dtype(numpy.bool_)), [])]
        for name, spec in specs.items():
            names = cf.flatten(body_scope, out[name], spec, site)
            outputs.extend(cf.value_info(n, s) for n, s in zip(names, cf.leaves(spec)))
        graph_inputs = [
            helper.make_tensor_value_info(iteration.name, helper.np_dtype_to_tensor_dtype(
                numpy.dtype(numpy.int64)), []),
            helper.make_tensor_value_info(cond_in, helper.np_dtype_to_tensor_dtype(
                numpy.dtype(numpy.bool_)), [])] + inputs
        graph = helper.make_graph(body_scope.nodes, outer.fresh('loop_body'), graph_inputs,
                                  outputs, value_info=body_scope.value_infos)

        # the Loop node, in the outer graph
        self.scope = outer
        frame.env = initial
        initial_values = []
        for name, spec in specs.items():
            value = self.binding(initial, name)
            if value is None or isinstance(value, cf.Undefined):
                value = cf.placeholder(outer, spec)
            initial_values.extend(cf.flatten(outer, value, spec, site, own=False))
        trip_name = '' if trip is None else cast(outer, outer.as_tensor(trip, site),
                                                 numpy.int64).name
        cond_name = ''
        if initial_cond is not None:
            cond_name = cast(outer, outer.as_tensor(initial_cond, site), numpy.bool_).name
        n_out = len(initial_values)
        results = outer.node('Loop', [trip_name, cond_name] + initial_values,
                             [outer.fresh('loop') for _ in range(n_out)], body=graph)
        results = [results] if isinstance(results, str) else list(results or [])
        ran = (trip is None or int(numpy.asarray(
            trip.example if isinstance(trip, Tensor) else constant_value(trip))) > 0) and (
            initial_cond is None or bool(numpy.asarray(
                initial_cond.example if isinstance(initial_cond, Tensor) else True)))
        loop_node = outer.nodes[-1]
        names = iter(results)
        env = dict(initial)
        for name, spec in specs.items():
            example = out[name] if ran else self.binding(initial, name)
            env[name] = cf.unflatten(spec, names, example)
            _declare(outer, env[name])
        examples = cf.run_on_examples(outer.translation, loop_node, list(specs.values()))
        if examples is not None:
            cf.set_examples([leaf for name, spec in specs.items()
                             for leaf in cf.leaf_values(env[name], spec)], examples)
        env[BROKE] = initial.get(BROKE, Const(False))
        env[CONTINUED] = initial.get(CONTINUED, Const(False))
        frame.env = env

    # -- branches ------------------------------------------------------------
    def dynamic_if(self, frame, cond, then_fn, else_fn, site):
        """An ONNX If on bool Tensor ``cond``: each branch function
        translates into its own body; names they bind differently are the
        If's outputs."""
        self.check_subgraph_depth(site)
        outer = self.scope
        base = frame.env
        envs, scopes = [], []
        for fn in (then_fn, else_fn):
            self.scope = outer.child()
            frame.env = fork(base)
            fn()
            envs.append(frame.env)
            scopes.append(self.scope)
        self.scope = outer
        then_env, else_env = envs
        result, specs = {}, {}
        for name in list(then_env) + [n for n in else_env if n not in then_env]:
            a, b = self.binding(then_env, name), self.binding(else_env, name)
            if a is None or b is None or isinstance(a, cf.Undefined) or \
                    isinstance(b, cf.Undefined):
                present = a if a is not None and not isinstance(a, cf.Undefined) else b
                if name == RET and present is not None and not isinstance(present, cf.Undefined):
                    specs[name] = cf.spec_of(present)
                else:
                    result[name] = cf.Undefined()
                continue
            if cf.unchanged(a, b):  # identical across branches: made before them
                result[name] = a
                continue
            specs[name] = cf.merge(a, b, site, name)
        branches = []
        for env, scope, label in zip(envs, scopes, ('then', 'else')):
            outputs = []
            for name, spec in specs.items():
                value = env.get(name)
                if value is None or isinstance(value, cf.Undefined):
                    value = cf.placeholder(scope, spec)
                names = cf.flatten(scope, value, spec, site)
                outputs.extend(cf.value_info(n, s) for n, s in zip(names, cf.leaves(spec)))
            branches.append(helper.make_graph(scope.nodes, outer.fresh(label), [], outputs,
                                              value_info=scope.value_infos))
        n_out = sum(len(cf.leaves(s)) for s in specs.values())
        if n_out == 0:
            # nothing differs between the branches that the graph could see
            frame.env = {**result, **{n: Const(s.value) for n, s in specs.items()}}
            return
        names = outer.node('If', [cond.name], [outer.fresh('if') for _ in range(n_out)],
                           then_branch=branches[0], else_branch=branches[1])
        names = iter([names] if isinstance(names, str) else names)
        taken = then_env if bool(numpy.asarray(cond.example)) else else_env
        for name, spec in specs.items():
            result[name] = cf.unflatten(spec, names, taken.get(name))
            _declare(outer, result[name])
        frame.env = result

    # -- assignment ------------------------------------------------------------
    def assign(self, frame, target, value):
        if isinstance(target, ast.Name):
            frame.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = self.items_of(frame, target, value, len(target.elts))
            if len(items) != len(target.elts):
                raise self.error(frame, target, 'cannot unpack %d values into %d names'
                                 % (len(items), len(target.elts)))
            for t, v in zip(target.elts, items):
                self.assign(frame, t, v)
        elif isinstance(target, ast.Attribute) and isinstance(
                owner := self.expr(frame, target.value), PyObject):
            self.set_object_attribute(frame, target, owner, value)
        elif isinstance(target, ast.Attribute) and isinstance(owner, Const):
            # a local of the translation, as the issue asks: later reads, in
            # this call and in later calls on the same object, see it; the
            # model keeps its own value
            self.assign_attribute(frame, owner.value, target.attr, value)
        elif isinstance(target, ast.Subscript):
            container = self.expr(frame, target.value)
            key = self.expr(frame, target.slice)
            if isinstance(container, PyList) and isinstance(key, Const):
                container.items[key.value] = value
            elif isinstance(container, PyDict) and isinstance(key, Const):
                container.items[key.value] = value
            else:
                raise self.error(frame, target, 'item assignment to %s is not supported'
                                 % container.kind)
        else:
            raise self.error(frame, target, 'assignment to %s is not supported'
                             % _construct(target))

    def items_of(self, frame, node, value, count=None):
        """The items of ``value`` as a list (unpacking, ``+=`` on lists)."""
        items = self.static_items(frame, node, value)
        if items is None and isinstance(value, Sequence) and count is not None:
            return [self.sequence_item(value, Const(i), self.site(frame, node))
                    for i in range(count)]
        if items is None:
            raise self.error(frame, node, 'cannot unpack %s whose length is only known at run '
                             'time' % value.kind)
        return items

    # -- expressions ------------------------------------------------------------
    def expr(self, frame, node):
        method = getattr(self, 'expr_' + type(node).__name__, None)
        if method is None:
            raise self.error(frame, node, '%s is not supported' % _construct(node))
        try:
            return method(frame, node)
        except RecursionError:
            raise self.error(frame, node, _TOO_DEEP) from None

    def expr_Constant(self, frame, node):
        return Const(node.value)

    def expr_Name(self, frame, node):
        if node.id in frame.env:
            value = frame.env[node.id]
            if isinstance(value, cf.Undefined):
                raise self.error(frame, node, "'%s' is bound on some paths only" % node.id)
            return value
        if node.id in frame.globals:
            return self.wrap(frame.globals[node.id])
        if hasattr(builtins, node.id):
            return Const(getattr(builtins, node.id))
        raise self.error(frame, node, "name '%s' is not defined" % node.id)

    def wrap(self, obj):
        """A Python object met during translation as a Value: Chainer
        Variables and Parameters become tensors (parameters as the model's
        initializers), anything else a constant."""
        if isinstance(obj, chainer.Variable):
            param = self.scope.param(obj.array)
            return param if param is not None else self.scope.const_tensor(obj.array)
        if isinstance(obj, numpy.ndarray):
            param = self.scope.param(obj)
            if param is not None:
                return param
        return Const(obj)

    def expr_Attribute(self, frame, node):
        value = self.expr(frame, node.value)
        site = self.site(frame, node)
        if isinstance(value, Const):
            key = self.attribute_key(value.value, node.attr)
            if key in frame.env:
                bound = frame.env[key]
                if isinstance(bound, cf.Undefined):
                    raise self.error(frame, node, "'%s' is bound on some paths only" % key)
                return bound
            try:
                return self.wrap(getattr(value.value, node.attr))
            except AttributeError:
                raise self.error(frame, node, '%s has no attribute %r'
                                 % (type(value.value).__name__, node.attr)) from None
        if isinstance(value, Tensor):
            if node.attr in _TENSOR_METHODS:
                return BoundMethod(value, node.attr, node.value)
            return tensor_attribute(self.scope, value, node.attr, site)
        if isinstance(value, (PyList, PyDict, Sequence)):
            return BoundMethod(value, node.attr, node.value)
        if isinstance(value, PyObject):
            return self.object_attribute(frame, node, value)
        raise self.error(frame, node, '%s has no attribute %r' % (value.kind, node.attr))

    def object_attribute(self, frame, node, obj):
        """``obj.attr`` of a PyObject: an attribute it was given, else its
        class's (a method binds ``obj``)."""
        if node.attr in obj.attrs:
            return obj.attrs[node.attr]
        try:
            static = inspect.getattr_static(obj.cls, node.attr)
        except AttributeError:
            raise self.error(frame, node, '%s object has no attribute %r'
                             % (obj.cls.__name__, node.attr)) from None
        if isinstance(static, types.FunctionType):
            return BoundMethod(obj, node.attr, node.value)
        if isinstance(static, property):
            return self.call_function(static.fget, [], {}, self.site(frame, node),
                                      self_value=obj)
        return self.wrap(getattr(obj.cls, node.attr))

    def expr_Tuple(self, frame, node):
        return PyTuple(tuple(self.starred(frame, node.elts)))

    def expr_List(self, frame, node):
        return PyList(self.starred(frame, node.elts))

    def starred(self, frame, elts):
        items = []
        for e in elts:
            if isinstance(e, ast.Starred):
                items.extend(self.items_of(frame, e, self.expr(frame, e.value)))
            else:
                items.append(self.expr(frame, e))
        return items

    def expr_Dict(self, frame, node):
        items = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise self.error(frame, node, '** in dict literals is not supported')
            key = self.expr(frame, k)
            if not isinstance(key, Const):
                raise self.error(frame, k, 'dict keys must be constants')
            items[key.value] = self.expr(frame, v)
        return PyDict(items)

    def expr_JoinedStr(self, frame, node):
        parts = [self.expr(frame, v) for v in node.values]
        if not all(isinstance(p, Const) for p in parts):
            raise self.error(frame, node, 'f-strings of run-time values are not supported')
        return Const(''.join(str(p.value) for p in parts))

    def expr_FormattedValue(self, frame, node):
        value = self.expr(frame, node.value)
        if not isinstance(value, Const):
            return value
        spec = '' if node.format_spec is None else constant_value(
            self.expr(frame, node.format_spec))
        return Const(format(value.value, spec))

    def expr_Lambda(self, frame, node):
        return Closure(node, frame)

    def expr_BinOp(self, frame, node):
        return binary(self.scope, node.op, _operand(self.expr(frame, node.left)),
                      _operand(self.expr(frame, node.right)), self.site(frame, node))

    def expr_UnaryOp(self, frame, node):
        return unary(self.scope, node.op, _operand(self.expr(frame, node.operand)),
                     self.site(frame, node))

    def expr_Compare(self, frame, node):
        site = self.site(frame, node)
        left = self.expr(frame, node.left)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.expr(frame, right_node)
            one = self.is_none(op, left, right)
            if one is None:
                one = compare(self.scope, op, _operand(left), _operand(right), site)
            result = one if result is None else self.logical('And', result, one, site)
            left = right
        return result

    def is_none(self, op, left, right):
        """``x is None`` / ``x is not None`` of a MaybeNone ``x``: a run-time
        bool; None for any other comparison."""
        if not isinstance(op, (ast.Is, ast.IsNot)):
            return None
        maybe, other = (left, right) if isinstance(left, MaybeNone) else (right, left)
        if not isinstance(maybe, MaybeNone) or not isinstance(other, Const) or \
                other.value is not None:
            return None
        if isinstance(op, ast.IsNot):
            return maybe.is_set
        return self.scope.emit('Not', [maybe.is_set], ~maybe.is_set.example)

    def expr_BoolOp(self, frame, node):
        """``and``/``or``: Python's short circuit while operands are
        constants (the result is an operand); once one is a tensor, the
        logical And/Or of the truths (a bool tensor)."""
        site = self.site(frame, node)
        op = 'And' if isinstance(node.op, ast.And) else 'Or'
        decided = op == 'Or'  # the truth that ends the evaluation
        acc = None
        for k, operand in enumerate(node.values):
            value = self.expr(frame, operand)
            if acc is None and k == len(node.values) - 1:
                return value
            t = truth(self.scope, value, site)
            if isinstance(t, Const):
                if t.value == decided:
                    return value if acc is None else Const(decided)
                continue
            acc = t if acc is None else self.logical(op, acc, t, site)
        return acc

    def logical(self, op, a, b, site):
        """And/Or of two truths (Consts fold)."""
        if isinstance(a, Const) or isinstance(b, Const):
            const, other = (a, b) if isinstance(a, Const) else (b, a)
            if op == 'And':
                return other if const.value else Const(False)
            return Const(True) if const.value else other
        a, b = truth(self.scope, a, site), truth(self.scope, b, site)
        example = (a.example & b.example) if op == 'And' else (a.example | b.example)
        return self.scope.emit(op, [a, b], example)

    def expr_IfExp(self, frame, node):
        cond = truth(self.scope, self.expr(frame, node.test), self.site(frame, node.test))
        if isinstance(cond, Const):
            return self.expr(frame, node.body if cond.value else node.orelse)
        key = '$ifexp'

        def branch(expr):
            return lambda: frame.env.__setitem__(key, self.expr(frame, expr))
        self.dynamic_if(frame, cond, branch(node.body), branch(node.orelse),
                        self.site(frame, node))
        return frame.env.pop(key)

    def expr_ListComp(self, frame, node):
        return self.comprehension(frame, node, node.elt)

    expr_GeneratorExp = expr_ListComp

    def comprehension(self, frame, node, element):
        """``[element for ... in ... if ...]``, translated as the loops it
        stands for, appending to a fresh list; its names stay local."""
        self.comprehensions += 1
        key = '$comprehension_%d' % self.comprehensions
        body = ast.Expr(ast.Call(func=ast.Attribute(ast.Name(key, ast.Load()), 'append',
                                                    ast.Load()),
                                 args=[element], keywords=[]))
        for generator in reversed(node.generators):
            if generator.is_async:
                raise self.error(frame, node, 'async comprehensions are not supported')
            for condition in reversed(generator.ifs):
                body = ast.If(test=condition, body=[body], orelse=[])
            body = ast.For(target=generator.target, iter=generator.iter, body=[body], orelse=[])
        ast.copy_location(body, node)
        for child in ast.walk(body):
            if not hasattr(child, 'lineno'):
                ast.copy_location(child, node)
        saved = dict(frame.env)
        frame.env[key] = PyList([])
        self.stmt(frame, body)
        result = frame.env.pop(key)
        targets = {n.id for g in node.generators for n in ast.walk(g.target)
                   if isinstance(n, ast.Name)}
        for name in targets:
            if name in saved:
                frame.env[name] = saved[name]
            else:
                frame.env.pop(name, None)
        return result

    def expr_Subscript(self, frame, node):
        container = self.expr(frame, node.value)
        key = self.expr(frame, node.slice)
        site = self.site(frame, node)
        if isinstance(container, (PyList, PyTuple)):
            if isinstance(key, Const):
                try:
                    picked = container.items[key.value]
                except (IndexError, TypeError) as e:
                    raise self.error(frame, node, str(e)) from None
                if isinstance(key.value, slice):
                    return type(container)(picked if isinstance(container, PyList)
                                           else tuple(picked))
                return picked
            dtype = cf._elements(container)[0]
            if dtype in (None, 'mixed'):
                raise self.error(frame, node, 'indexing a list by a run-time index needs '
                                 'a list of tensors of one dtype')
            container = cf.to_sequence(self.scope, container, dtype, site)
        if isinstance(container, PyDict):
            if not isinstance(key, Const) or key.value not in container.items:
                raise self.error(frame, node, 'dict key %s not found'
                                 % (key.value if isinstance(key, Const) else key.kind))
            return container.items[key.value]
        if isinstance(container, Sequence):
            if isinstance(key, SliceValue) or isinstance(key, Const) and \
                    isinstance(key.value, slice):
                return slice_sequence(self.scope, container, key, site)
            return self.sequence_item(container, key, site)
        if isinstance(container, Const):
            if is_constant(key):
                try:
                    return self.wrap(container.value[constant_value(key)])
                except Exception as e:
                    raise self.error(frame, node, 'indexing fails: %s' % e) from None
            container = self.scope.as_tensor(container, site, 'the indexed value')
        if isinstance(container, Tensor):
            return index_tensor(self.scope, container, key, site)
        raise self.error(frame, node, '%s cannot be indexed' % container.kind)

    def expr_Slice(self, frame, node):
        parts = [None if p is None else self.expr(frame, p)
                 for p in (node.lower, node.upper, node.step)]
        if all(p is None or isinstance(p, Const) for p in parts):
            return Const(slice(*[None if p is None else p.value for p in parts]))
        return SliceValue(*parts)

    def sequence_item(self, seq, index, site):
        index = cast(self.scope, self.scope.as_tensor(index, site, 'a list index'), numpy.int64)
        examples = seq.examples
        k = int(index.example) if examples else 0
        example = examples[k] if examples and -len(examples) <= k < len(examples) else \
            numpy.zeros([1 if d is None else d for d in (seq.element_shape or ())], seq.dtype)
        name = self.scope.node('SequenceAt', [seq.name, index.name])
        return Tensor(name, example, seq.element_shape if seq.element_shape is not None and
                      len(seq.element_shape) == numpy.ndim(example) else None)

    def tensor_item(self, tensor, index):
        """``tensor[index]`` along the first axis (iteration)."""
        i = index.value if isinstance(index, Const) else None
        idx = self.scope.const_tensor(numpy.int64(i)) if i is not None else \
            cast(self.scope, index, numpy.int64)
        k = i if i is not None else int(idx.example)
        example = tensor.example[k] if tensor.example.shape[0] > k else \
            numpy.zeros(tensor.example.shape[1:], tensor.dtype)
        return Tensor(self.scope.node('Gather', [tensor.name, idx.name], axis=0), example,
                      tensor.shape[1:])

    # -- calls ---------------------------------------------------------------
    def expr_Call(self, frame, node):
        site = self.site(frame, node)
        if isinstance(node.func, ast.Name) and node.func.id == 'print' and \
                'print' not in frame.env:
            return Const(None)  # print is dropped
        callee = self.expr(frame, node.func)
        args = self.starred(frame, node.args)
        kwargs = {}
        for kw in node.keywords:
            value = self.expr(frame, kw.value)
            if kw.arg is not None:
                kwargs[kw.arg] = value
            elif isinstance(value, PyDict) and all(isinstance(k, str) for k in value.items):
                kwargs.update(value.items)
            else:
                raise self.error(frame, node, '** in a call needs a dict of constant keys')
        return self.call(frame, node, callee, args, kwargs, site)

    def call(self, frame, node, callee, args, kwargs, site):
        if isinstance(callee, Closure):
            return self.call_function(callee, args, kwargs, site)
        if isinstance(callee, BoundMethod):
            return self.call_method(frame, node, callee, args, kwargs, site)
        if not isinstance(callee, Const):
            raise self.error(frame, node, '%s is not callable' % callee.kind)
        fn = callee.value
        if fn is print:
            return Const(None)
        builtin = _BUILTINS.get(fn) if _hashable(fn) else None
        if builtin is not None:
            return builtin(self, frame, node, args, kwargs, site)
        if fn in (chainer.Variable, chainer.as_variable):
            return args[0]
        if fn is chainer.report or fn is chainer.reporter.report:
            return Const(None)  # reports are for the Trainer, not the graph
        if isinstance(fn, chainer.Link):
            if _is_chainer_builtin(fn) and not any(not _is_chainer_builtin(link)
                                                    for link in fn.links(skipself=True)) \
                    and not isinstance(fn, chainer.links.Classifier):
                return self.chainer_call(fn, args, kwargs, site)
            forward, self_value = _forward_of(fn, site)
            return self.call_function(forward, args, kwargs, site, self_value=self_value)
        if _is_plain_class(fn):
            return self.construct(fn, args, kwargs, site)
        if isinstance(fn, type) and issubclass(fn, chainer.FunctionNode) and \
                all(is_constant(a) for a in list(args) + list(kwargs.values())):
            return Const(fn(*[constant_value(a) for a in args],
                            **{k: constant_value(v) for k, v in kwargs.items()}))
        if isinstance(fn, types.MethodType) and isinstance(fn.__self__, chainer.FunctionNode):
            return self.chainer_call(fn, args, kwargs, site)  # a user's FunctionNode.apply
        if isinstance(fn, types.MethodType):
            owner = fn.__self__
            if isinstance(owner, chainer.Link) and not fn.__func__.__module__.startswith(
                    'chainer.'):
                return self.call_function(fn.__func__, args, kwargs, site,
                                          self_value=Const(owner))
            if isinstance(owner, chainer.Link) and fn.__name__ in _LINK_ITERATORS and \
                    all(is_constant(a) for a in list(args) + list(kwargs.values())):
                # the model's structure is fixed at export time: a list of
                # links (or parameters) that a for loop unrolls over
                return Const(list(fn(*[constant_value(a) for a in args],
                                     **{k: constant_value(v) for k, v in kwargs.items()})))
        module = getattr(fn, '__module__', None) or ''
        if isinstance(fn, numpy.ufunc) or module.split('.')[0] in ('numpy', 'cupy'):
            return call_numpy(self.scope, fn.__name__, args, kwargs, site)
        if module.startswith('chainer.functions') or module.startswith('chainer.links'):
            return self.chainer_call(fn, args, kwargs, site)
        if module.startswith('chainer') and callable(fn) and _is_config_factory(fn):
            return Const(fn(*[constant_value(a) for a in args],
                            **{k: constant_value(v) for k, v in kwargs.items()}))
        if isinstance(fn, types.FunctionType):
            return self.call_function(fn, args, kwargs, site)
        raise self.error(frame, node, 'calling %s is not supported'
                         % getattr(fn, '__qualname__', type(fn).__name__))

    def chainer_call(self, fn, args, kwargs, site):
        """Call Chainer function or link ``fn``.  An argument that may be
        None at run time makes the call an If on whether it is set: Chainer
        treats None (an absent LSTM state, say) otherwise than zeros."""
        maybe = next((v for v in list(args) + list(kwargs.values())
                      if isinstance(v, MaybeNone)), None)
        if maybe is None:
            return call_chainer(self.scope, fn, args, kwargs, site)
        frame = Frame({}, {}, site)

        def branch(value):
            def call():
                def put(v):
                    return value if v is maybe else v
                frame.env['$call'] = self.chainer_call(
                    fn, [put(a) for a in args], {k: put(v) for k, v in kwargs.items()}, site)
            return call
        self.dynamic_if(frame, maybe.is_set, branch(maybe.tensor), branch(Const(None)), site)
        return frame.env['$call']

    def construct(self, cls, args, kwargs, site):
        """``cls(*args, **kwargs)`` of a plain Python class: a PyObject
        whose ``__init__`` is inlined."""
        obj = PyObject(cls, self.scope)
        if cls.__init__ is not object.__init__:
            self.call_function(cls.__init__, args, kwargs, site, self_value=obj)
        elif args or kwargs:
            raise TranslationError(site, '%s() takes no arguments' % cls.__name__)
        return obj

    def set_object_attribute(self, frame, target, obj, value):
        """``obj.attr = value`` on a PyObject."""
        self.check_object_scope(frame, target, obj, 'setting %s.%s' % (obj.cls.__name__,
                                                                        target.attr))
        obj.attrs[target.attr] = value
        if isinstance(value, PyList):
            self.held_lists[id(value)] = (value, obj)

    def check_object_scope(self, frame, node, obj, what):
        """Refuse to change PyObject ``obj`` (``what`` says how) from the body
        of a branch or loop that it was made outside of."""
        if self.scope is not obj.scope:
            raise self.error(frame, node, '%s inside a branch or loop that depends on the '
                             'inputs is not supported when the %s object was made outside it'
                             % (what, obj.cls.__name__))

    def call_method(self, frame, node, method, args, kwargs, site):
        target, name = method.target, method.name
        if isinstance(target, PyObject):
            return self.call_function(getattr(target.cls, name), args, kwargs, site,
                                      self_value=target)
        if isinstance(target, PyList) and id(target) in self.held_lists:
            owner = self.held_lists[id(target)][1]
            self.check_object_scope(frame, node, owner, 'changing a list attribute of %s'
                                    % owner.cls.__name__)
        if isinstance(target, PyList):
            if name == 'append' and len(args) == 1:
                target.items.append(args[0])
                return Const(None)
            if name == 'extend' and len(args) == 1:
                target.items.extend(self.items_of(frame, node, args[0]))
                return Const(None)
            if name == 'pop' and len(args) <= 1 and all(isinstance(a, Const) for a in args):
                return target.items.pop(*[a.value for a in args])
            if name == 'insert' and len(args) == 2 and isinstance(args[0], Const):
                target.items.insert(args[0].value, args[1])
                return Const(None)
            if name == 'reverse' and not args:
                target.items.reverse()
                return Const(None)
        if isinstance(target, PyDict):
            items = target.items
            if name == 'keys':
                return PyList([Const(k) for k in items])
            if name == 'values':
                return PyList(list(items.values()))
            if name == 'items':
                return PyList([PyTuple((Const(k), v)) for k, v in items.items()])
            if name == 'get' and args and isinstance(args[0], Const):
                return items.get(args[0].value, args[1] if len(args) > 1 else Const(None))
        if isinstance(target, Sequence) and name == 'append' and len(args) == 1:
            if not isinstance(method.target_node, ast.Name):
                raise self.error(frame, node, 'append to a run-time-length list must name it '
                                 'directly (xs.append(...))')
            item = cast(self.scope, self.scope.as_tensor(args[0], site, 'the appended item'),
                        target.dtype)
            name_out = self.scope.node('SequenceInsert', [target.name, item.name])
            frame.env[method.target_node.id] = Sequence(
                name_out, target.dtype, cf._merge_shapes(target.element_shape, item.shape),
                list(target.examples) + [item.example])
            return Const(None)
        if isinstance(target, Tensor):
            return tensor_method(self.scope, target, name, args, kwargs, site)
        raise self.error(frame, node, '%s.%s(...) is not supported' % (target.kind, name))


_TENSOR_METHODS = ('astype', 'reshape', 'transpose', 'sum', 'mean', 'max', 'min', 'argmax',
                   'argmin', 'squeeze', 'flatten', 'ravel', 'any', 'all', 'copy', 'prod',
                   'cumsum', 'clip', 'dot', 'swapaxes', 'item', 'tolist', 'repeat', 'fill')

#: Link methods that walk the model's structure, known at export time.
_LINK_ITERATORS = ('children', 'links', 'namedlinks', 'params', 'namedparams')


def _operand(value):
    """``value`` as an operand of an operator: a MaybeNone's tensor (where
    it is None, Python would fail on the operator)."""
    return value.tensor if isinstance(value, MaybeNone) else value


def _hashable(obj):
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def _is_plain_class(fn):
    """Whether ``fn`` is a class written by the user (not Chainer's, NumPy's
    or a builtin, not a Link or FunctionNode) that ch2o can construct: no
    metaclass, no ``__new__``, a Python ``__init__`` if any."""
    if not isinstance(fn, type) or type(fn) is not type or \
            issubclass(fn, (chainer.Link, chainer.FunctionNode)):
        return False
    if fn.__module__.split('.')[0] in ('builtins', 'chainer', 'numpy', 'cupy'):
        return False
    return fn.__new__ is object.__new__ and (
        fn.__init__ is object.__init__ or isinstance(fn.__init__, types.FunctionType))


def _forward_of(link, site):
    """(the function ``link(...)`` runs, the Value its ``self`` is bound to
    or None): what ``Link.__call__`` calls, looked up as it looks it up, so
    an instance attribute, ``__getattribute__`` or ``__getattr__`` that
    makes ``link.forward`` another function is what gets translated."""
    mixin = getattr(super(chainer.Link, link), '__call__', None)  # noqa: B004 (as Link does)
    if mixin is not None:  # Link.__call__ prefers a __call__ after Link in the bases
        raise TranslationError(site, '%s(...) runs %s, not forward: ch2o translates forward'
                               % (type(link).__name__, _name_of(mixin)))
    try:
        forward = link.forward
    except AttributeError:
        raise TranslationError(site, '%s has no forward method' % type(link).__name__) from None
    if isinstance(forward, types.MethodType):
        return forward.__func__, Const(forward.__self__)
    return forward, None


def _name_of(fn):
    """How messages name callable ``fn``."""
    name = getattr(fn, '__qualname__', None) or getattr(fn, '__name__', None) or repr(fn)
    module = getattr(fn, '__module__', None)
    return '%s.%s' % (module, name) if module else name


def _is_config_manager(obj):
    return hasattr(obj, '__enter__') and type(obj).__module__.startswith('chainer')


def _is_config_factory(fn):
    return fn in (chainer.using_config, chainer.no_backprop_mode, chainer.force_backprop_mode)


def _construct(node):
    """How messages name the construct of AST ``node``."""
    names = {'ClassDef': 'class definitions', 'Try': 'try', 'Global': 'global',
             'Nonlocal': 'nonlocal', 'Yield': 'yield (generators)', 'YieldFrom': 'yield from',
             'Await': 'await', 'AsyncFunctionDef': 'async functions', 'Set': 'sets',
             'SetComp': 'set comprehensions', 'DictComp': 'dict comprehensions',
             'Import': 'import', 'ImportFrom': 'import', 'Starred': 'starred expressions',
             'NamedExpr': 'the walrus operator :=', 'Match': 'match'}
    name = type(node).__name__
    return "'%s'" % names.get(name, name)


def _static_getter(translator, iterable, items, site):
    """An item getter by run-time index for an iterable of known items."""
    def get(i):
        if isinstance(iterable, Tensor):
            return translator.tensor_item(iterable, i)
        dtype = cf._elements(PyList(items))[0]
        if dtype in (None, 'mixed'):
            raise TranslationError(site, 'zip() of a run-time-length iterable with a list '
                                   'needs a list of tensors of one dtype')
        seq = cf.to_sequence(translator.scope, PyList(items), dtype, site)
        return translator.sequence_item(seq, i, site)
    return get


# -- builtins -------------------------------------------------------------------
def _range(tr, frame, node, args, kwargs, site):
    if kwargs or not 1 <= len(args) <= 3:
        raise tr.error(frame, node, 'range() takes 1 to 3 positional arguments')
    if all(isinstance(a, Const) for a in args):
        try:
            values = range(*[a.value for a in args])
        except (TypeError, ValueError) as e:
            raise tr.error(frame, node, 'range(): %s' % e) from None
        # the length of a slice: a huge range's own len() overflows
        tr.check_static_length(frame, node, len(values[:MAX_UNROLLED_ITERATIONS + 1]))
        return PyList([Const(i) for i in values])
    start, stop, step = ([Const(0)] + args + [Const(1)])[:3] if len(args) == 1 else (
        args + [Const(1)])[:3]
    return RangeValue(start, stop, step)


def _len(tr, frame, node, args, kwargs, site):
    value, = args
    if isinstance(value, (PyList, PyTuple, PyDict)):
        return Const(len(value.items))
    if isinstance(value, Const):
        return Const(len(value.value))
    if isinstance(value, Sequence):
        return tr.scope.emit('SequenceLength', [value.name], numpy.int64(len(value.examples)))
    if isinstance(value, Tensor):
        if value.shape and value.shape[0] is not None:
            return Const(value.shape[0])
        shape = tr.scope.emit('Shape', [value], numpy.array(value.example.shape))
        return tr.scope.emit('Gather', [shape, tr.scope.const_tensor(numpy.int64(0))],
                             numpy.int64(value.example.shape[0]), axis=0)
    if isinstance(value, RangeValue):
        trip, _ = tr.dynamic_iteration(frame, node, value)
        return trip
    raise tr.error(frame, node, 'len() of %s' % value.kind)


def _zip(tr, frame, node, args, kwargs, site):
    static = [tr.static_items(frame, node, a) for a in args]
    if all(s is not None for s in static):
        return PyList([PyTuple(tuple(row)) for row in zip(*static)])
    return ZipValue(list(args))


def _enumerate(tr, frame, node, args, kwargs, site):
    value = args[0]
    start = args[1] if len(args) > 1 else kwargs.get('start', Const(0))
    items = tr.static_items(frame, node, value)
    if items is not None and isinstance(start, Const):
        return PyList([PyTuple((Const(start.value + i), v)) for i, v in enumerate(items)])
    count = RangeValue(start, Const(2 ** 62), Const(1))
    return ZipValue([count, value])


def _list(tr, frame, node, args, kwargs, site):
    if not args:
        return PyList([])
    value = args[0]
    items = tr.static_items(frame, node, value)
    if items is not None:
        return PyList(list(items))
    if isinstance(value, Sequence):
        return value
    if isinstance(value, RangeValue):
        return _range_sequence(tr, value, site)
    raise tr.error(frame, node, 'list() of %s' % value.kind)


def _tuple(tr, frame, node, args, kwargs, site):
    items = tr.static_items(frame, node, args[0]) if args else []
    if items is None:
        raise tr.error(frame, node, 'tuple() of a value whose length is only known at run '
                       'time; use list()')
    return PyTuple(tuple(items))


def _range_sequence(tr, value, site):
    """A run-time range as a sequence of 0-d int64 tensors."""
    scope = tr.scope
    ints = [cast(scope, scope.as_tensor(v, site), numpy.int64)
            for v in (value.start, value.stop, value.step)]
    example = numpy.arange(*[int(t.example) for t in ints], dtype=numpy.int64)
    r = scope.emit('Range', ints, example)
    name = scope.node('SplitToSequence', [r.name], axis=0, keepdims=0)
    return Sequence(name, numpy.dtype(numpy.int64), (), list(example))


def _scalar_cast(dtype, python_type):
    def convert(tr, frame, node, args, kwargs, site):
        value, = args
        if isinstance(value, Const):
            return Const(python_type(value.value))
        t = tr.scope.as_tensor(value, site)
        return cast(tr.scope, t, dtype)
    return convert


def _min_max(op, python_fn):
    def reduce(tr, frame, node, args, kwargs, site):
        values = args if len(args) > 1 else tr.items_of(frame, node, args[0])
        if all(isinstance(v, Const) for v in values):
            return Const(python_fn(v.value for v in values))
        tensors = [tr.scope.as_tensor(v, site) for v in values]
        dtype = numpy.result_type(*[t.example for t in tensors])
        tensors = [cast(tr.scope, t, dtype) for t in tensors]
        example = python_fn(t.example for t in tensors) if len(tensors) > 1 else \
            tensors[0].example
        fn = numpy.minimum if op == 'Min' else numpy.maximum
        for t in tensors[1:]:
            example = fn(example, t.example)
        return tr.scope.emit(op, tensors, example)
    return reduce


def _abs(tr, frame, node, args, kwargs, site):
    value, = args
    if isinstance(value, Const):
        return Const(abs(value.value))
    t = tr.scope.as_tensor(value, site)
    return tr.scope.emit('Abs', [t], numpy.abs(t.example))


def _sum(tr, frame, node, args, kwargs, site):
    items = tr.items_of(frame, node, args[0])
    total = args[1] if len(args) > 1 else Const(0)
    for item in items:
        total = binary(tr.scope, ast.Add(), total, item, site)
    return total


def _isinstance(tr, frame, node, args, kwargs, site):
    value, classes = args
    if isinstance(value, Const):
        return Const(isinstance(value.value, constant_value(classes)))
    kinds = {Tensor: (chainer.Variable, numpy.ndarray), PyList: (list,), PyTuple: (tuple,),
             PyDict: (dict,), Sequence: (list,)}
    wanted = constant_value(classes)
    wanted = wanted if isinstance(wanted, tuple) else (wanted,)
    if isinstance(value, PyObject):
        return Const(issubclass(value.cls, wanted))
    return Const(any(issubclass(k, wanted) for k in kinds.get(type(value), ())))


_BUILTINS = {
    range: _range, len: _len, zip: _zip, enumerate: _enumerate, list: _list, tuple: _tuple,
    int: _scalar_cast(numpy.int64, int), float: _scalar_cast(numpy.float32, float),
    bool: _scalar_cast(numpy.bool_, bool), min: _min_max('Min', min),
    max: _min_max('Max', max), abs: _abs, sum: _sum, isinstance: _isinstance,
}


def _declare(scope, value):
    """Declare the static shapes of the tensors in ``value`` (outputs of a
    Loop or If) in ``scope``'s graph: ONNX shape inference cannot tell that
    a loop-carried value keeps its shape, and training needs static shapes."""
    if isinstance(value, Tensor):
        if all(isinstance(d, int) for d in value.shape):
            scope.value_infos.append(cf.value_info(
                value.name, cf.TensorSpec(value.dtype, value.shape)))
    elif isinstance(value, (PyList, PyTuple)):
        for item in value.items:
            _declare(scope, item)
    elif isinstance(value, PyDict):
        for item in value.items.values():
            _declare(scope, item)


def _always_returns(stmts):
    """Whether every path through ``stmts`` ends in a return statement
    (then a return flag that depends on the inputs is true on all of them)."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    if isinstance(last, ast.If):
        return _always_returns(last.body) and _always_returns(last.orelse)
    if isinstance(last, ast.With):
        return _always_returns(last.body)
    return False


def env_get(frame, name):
    return frame.env.get(name, Const(False))


# -- the model -------------------------------------------------------------------
def export_model(model, args, opset_version=None, input_names=None, output_names=None):
    """Translate ``model.forward``'s source, called on ``args`` (its
    positional arguments), and return the ONNX ModelProto.

    Each argument becomes a graph input (``input_<i>``): arrays and
    Variables tensors of their dtype and shape, Python and NumPy scalars
    0-d tensors, lists and tuples of arrays ONNX sequences, None a 0-d bool
    (False).  ``forward``'s result becomes the outputs (``output_<i>``): one
    per element of a returned tuple, a list or nested tuple as a sequence.
    Parameters and persistent arrays are initializers named by link path,
    as the tracing translator names them; all of them are in the file.
    What is translated is what ``model(*args)`` runs: ``model.forward`` as
    ``Link.__call__`` looks it up, decorators' wrappers included, from
    source that still compiles to the code that runs.  Raises
    TranslationError naming the file, line and construct for anything
    outside the supported subset, for source edited since import, and past
    MAX_UNROLLED_ITERATIONS, MAX_CALL_DEPTH and MAX_SUBGRAPH_DEPTH."""
    from ..onnx_chainer.naming import named_arrays
    from ..onnx_chainer.tracing import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET, _names
    opset = DEFAULT_OPSET if opset_version is None else int(opset_version)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError('opset_version %d is not supported: choose %d to %d'
                         % (opset, MIN_OPSET, MAX_OPSET))
    if not isinstance(args, (list, tuple)):
        args = [args]
    translation = Translation(opset, model)
    root = Scope(translation)
    state_names = {a.name: 'a parameter' if a.is_parameter else 'a persistent value'
                   for a in named_arrays(model)}
    in_names = _names(input_names, len(args), 'input', 'input_names', state_names)
    for name in in_names:
        root.reserve(name)
    inputs, graph_inputs = [], []
    for name, arg in zip(in_names, args):
        value, info = _graph_input(name, arg)
        inputs.append(value)
        graph_inputs.append(info)
    translator = Translator(root)
    site = '%s.%s.forward' % (type(model).__module__, type(model).__qualname__)
    forward, self_value = _forward_of(model, site)
    with chainer.using_config('train', False), chainer.using_config('enable_backprop', True), \
            recording({value.name: value for value in inputs
                       if isinstance(value, (Tensor, Sequence))}):
        result = translator.call_function(forward, inputs, {}, site, self_value=self_value)
    if isinstance(result, RangeValue):
        result = _range_sequence(translator, result, '<export>')
    items = list(result.items) if isinstance(result, PyTuple) else (
        list(result.items.values()) if isinstance(result, PyDict) else [result])
    taken = {**state_names, **{name: 'an input' for name in in_names}}
    out_names = _names(output_names, len(items), 'output', 'output_names', taken)
    graph_outputs = [_graph_output(translator, root, name, item)
                     for name, item in zip(out_names, items)]
    for a in named_arrays(model):
        array = a.value.array if a.is_parameter else a.value
        if array is not None:
            translation.add_state(root, a.name, chainer.backend.CpuDevice().send(array))
    _drop_unused_constants(root, translation)
    proto = root.make_model(type(model).__name__, graph_inputs, graph_outputs)
    proto.graph.value_info.extend(root.value_infos)
    return proto


def _graph_input(name, arg):
    """(the Value ``forward`` sees, the graph input's ValueInfoProto)."""
    if isinstance(arg, (list, tuple)):
        arrays = [numpy.asarray(a.array if isinstance(a, chainer.Variable) else a)
                  for a in arg]
        if not arrays:
            raise ValueError('%s: an empty list argument has no element type; give at least '
                             'one array' % name)
        dtype = arrays[0].dtype
        if any(a.dtype != dtype for a in arrays):
            raise ValueError('%s: a list argument must hold arrays of one dtype' % name)
        shape = tuple(arrays[0].shape)
        for a in arrays[1:]:
            shape = cf._merge_shapes(shape, a.shape)
        seq = Sequence(name, dtype, shape, arrays)
        return seq, cf.value_info(name, cf.SequenceSpec(dtype, shape))
    if arg is None:
        return Const(None), cf.value_info(name, cf.TensorSpec(numpy.dtype(numpy.bool_), ()))
    if isinstance(arg, chainer.Variable):
        arg = arg.array
    if isinstance(arg, bool):
        array = numpy.asarray(arg)
    elif isinstance(arg, int):
        array = numpy.asarray(arg, numpy.int64)
    elif isinstance(arg, float):
        array = numpy.asarray(arg, numpy.float32)
    else:
        array = numpy.asarray(chainer.backend.CpuDevice().send(arg))
    tensor = Tensor(name, array)
    return tensor, cf.value_info(name, cf.TensorSpec(array.dtype, array.shape))


def _graph_output(translator, root, name, value):
    """Make ``value`` graph output ``name``; return its ValueInfoProto."""
    site = '<the value forward returns>'
    if isinstance(value, Const) and value.value is None:
        value = Const(False)
    if isinstance(value, (PyList, PyTuple, Sequence, RangeValue)):
        if isinstance(value, RangeValue):
            value = _range_sequence(translator, value, site)
        if not isinstance(value, Sequence):
            dtype = cf._elements(value)[0]
            if dtype == 'mixed':
                raise TranslationError(site, 'a returned list must hold tensors of one dtype')
            if dtype is None:
                dtype = numpy.dtype(numpy.float32)
            value = cf.to_sequence(root, value, dtype, site)
        root.node('Identity', [value.name], [name])
        return cf.value_info(name, cf.SequenceSpec(value.dtype, value.element_shape))
    tensor = root.as_tensor(value, site, 'a returned value')
    root.node('Identity', [tensor.name], [name])
    return cf.value_info(name, cf.TensorSpec(tensor.dtype, tensor.shape))


def _drop_unused_constants(root, translation):
    """Remove constant initializers nothing reads (left by loop bodies
    translated again); the model's parameters all stay."""
    used = set()

    def collect(nodes):
        for node in nodes:
            used.update(node.input)
            for attr in node.attribute:
                if attr.type == attr.GRAPH:
                    collect(attr.g.node)
                    used.update(o.name for o in attr.g.output)
    collect(root.nodes)
    keep = translation.added_state_names()
    root.initializers[:] = [t for t in root.initializers if t.name in used or t.name in keep]


__all__ = ['TranslationError', 'export_model']
