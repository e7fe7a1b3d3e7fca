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
import types

import chainer
import numpy

from . import control_flow as cf
from . import limits
from .builtin_calls import BUILTINS, Call, call_at_export_time
from .functions import call_chainer
from .indexing import SliceValue, index_tensor, slice_sequence
from .iteration import (
    RangeValue,
    dynamic_iteration,
    items_of,
    range_sequence,
    sequence_item,
    static_items,
    wrap,
)
from .numpy_calls import call_numpy, tensor_attribute
from .operators import binary, compare, is_none, logical, truth, unary
from .scope import Scope, Translation
from .source import function_ast
from .values import (
    Const,
    MaybeNone,
    PyDict,
    PyList,
    PyObject,
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

#: What hitting Python's recursion limit inside translation is reported as.
_TOO_DEEP = ('nested too deeply to translate within Python\'s recursion limit (too many '
             'operators in an expression, or statements, calls, branches or lists nested too '
             'deep)')


class Closure(Value):
    """A lambda or a function defined inside translated code."""
    kind = 'a function'

    def __init__(self, node, frame):
        self.node, self.frame = node, frame


class BoundMethod(Value):
    """``obj.name`` where ``obj`` is a list, dict, sequence, tensor or
    PyObject."""
    kind = 'a method'

    def __init__(self, target, name, target_node):
        self.target, self.name, self.target_node = target, name, target_node


class Frame:
    """One activation of a translated function: its bindings, globals and
    source file."""

    def __init__(self, env, globals_, filename):
        self.env = env
        self.globals = globals_
        self.filename = filename


def _is_chainer_builtin(obj):
    return type(obj).__module__.split('.')[0] == 'chainer'


class AttributeBindings:
    """The attributes of objects known at export time that translated code
    assigns (``self.h = ...``).  Such a binding is a local of the
    translation, held in the env under ``key(obj, attr)``: it passes from a
    call to its caller and on to later calls, and merges across branches
    and loop iterations like a name; the object keeps its own value."""

    def __init__(self, scope):
        self._scope = scope  # where the objects' own values are made
        self._assigned = {}  # env key -> (object, attribute name)

    @staticmethod
    def key(obj, attr):
        return 'self.%s (%s at %#x)' % (attr, type(obj).__name__, id(obj))

    def assign(self, env, obj, attr, value):
        """``obj.attr = value`` in bindings ``env``."""
        key = self.key(obj, attr)
        self._assigned[key] = (obj, attr)
        env[key] = value

    def binding(self, env, name):
        """``env[name]``; for an attribute no path of ``env`` assigned yet,
        the object's own value (what a loop starts from); else None."""
        value = env.get(name)
        if not cf.bound(value) and name in self._assigned:
            obj, attr = self._assigned[name]
            if hasattr(obj, attr):
                return wrap(self._scope, getattr(obj, attr))
        return value

    def pass_on(self, source, target):
        """Copy the attribute bindings of env ``source`` into env ``target``
        (into a call, and back to its caller)."""
        target.update((k, v) for k, v in source.items() if k in self._assigned)


class Translator:
    """Translates statements and expressions into the current Scope."""

    def __init__(self, scope):
        self.scope = scope
        self.comprehensions = 0  # numbers the hidden list of each comprehension
        self.attributes = AttributeBindings(scope)
        self.binding = self.attributes.binding
        self.frames = []  # the frames of the inlined calls under way, innermost last
        #: id of a list held by a PyObject's attribute -> (the list, the PyObject)
        self.held_lists = {}
        self.unrolling = limits.Unrolling()

    @contextlib.contextmanager
    def translating(self, frame, scope, env):
        """Translate into graph ``scope`` with ``frame`` bound to ``env``;
        the scope and bindings before are back on leaving, after an error
        too."""
        saved = self.scope, frame.env
        self.scope, frame.env = scope, env
        try:
            yield
        finally:
            self.scope, frame.env = saved

    # -- sites and errors ------------------------------------------------------
    @staticmethod
    def site(frame, node):
        return '%s:%d' % (frame.filename, getattr(node, 'lineno', 0))

    def error(self, frame, node, message):
        return TranslationError(self.site(frame, node), message)

    # -- functions ----------------------------------------------------------
    def call_function(self, fn, args, kwargs, site, self_value=None):
        """Inline Python function ``fn`` (a function, or a Closure) called
        with Values ``args``/``kwargs``; return its result."""
        limits.check_call_depth(len(self.frames), site)
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
        frame = Frame(env, globals_, filename)
        env.update(self.bind_arguments(frame, fn, node, args, kwargs, site, self_value))
        caller = self.frames[-1] if self.frames else None
        if caller is not None:
            self.attributes.pass_on(caller.env, env)
        self.frames.append(frame)
        try:
            result = self.run_body(frame, node)
        finally:
            self.frames.pop()
        if caller is not None:
            self.attributes.pass_on(frame.env, caller.env)
        return result

    def bind_arguments(self, frame, fn, node, args, kwargs, site, self_value):
        """The bindings of the parameters of ``fn`` (FunctionDef or Lambda
        ``node``) to the Values of a call, defaults included."""
        params = node.args
        if params.posonlyargs:
            raise TranslationError('%s:%d' % (frame.filename, node.lineno),
                                   'positional-only parameters are not supported')
        names = [a.arg for a in params.args]
        values = list(args)
        if self_value is not None:
            values.insert(0, self_value)
        if len(values) > len(names) and not params.vararg:
            raise TranslationError(site, '%s takes %d arguments, %d given'
                                   % (getattr(node, 'name', 'lambda'), len(names), len(values)))
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
        return bound

    def run_body(self, frame, node):
        """The result of the function or lambda AST ``node`` run in
        ``frame`` (its arguments bound)."""
        env = frame.env
        if isinstance(node, ast.Lambda):
            return self.expr(frame, node.body)
        env[RETURNED] = Const(False)
        env[BROKE] = env[CONTINUED] = Const(False)
        self.block(frame, node.body)
        returned = frame.env.get(RETURNED, Const(False))
        if isinstance(returned, Tensor) and not _always_returns(node.body):
            raise TranslationError('%s:%d' % (frame.filename, node.lineno),
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
        if isinstance(node, (ast.Pass, ast.Assert)):
            return  # assertions check the export-time run; the graph has none
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
        site = self.site(frame, node)
        if isinstance(current, PyList) and isinstance(node.op, ast.Add):
            current.items.extend(items_of(self.scope, value, site))  # in place, as Python
            return
        self.assign(frame, node.target, binary(self.scope, node.op, _operand(current),
                                               _operand(value), site))

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
        _refuse_loop_else(self, frame, node)
        iterable = self.expr(frame, node.iter)
        site = self.site(frame, node)
        static = static_items(self.scope, iterable, self.site(frame, node.iter))

        def bind(item):
            self.assign(frame, node.target, item)

        if static is not None:
            self.unrolling.count(len(static), site)
            with _loop_flags(frame):
                self.unroll(frame, [lambda item=item: bind(item) for item in static],
                            node.body, site)
        else:
            trip, getter = dynamic_iteration(self.scope, iterable, self.site(frame, node.iter))
            self.dynamic_loop(frame, trip, None, lambda i: bind(getter(self.scope, i)),
                              node.body, site)

    def stmt_While(self, frame, node):
        """Unrolled while the condition is known at export time; from the
        first condition (or break) that depends on the inputs on, a Loop."""
        _refuse_loop_else(self, frame, node)
        site = self.site(frame, node)
        with _loop_flags(frame):
            while True:
                stop = self.exited(frame, (RETURNED, BROKE))
                if isinstance(stop, Const) and stop.value:
                    break
                cond = truth(self.scope, self.expr(frame, node.test),
                             self.site(frame, node.test))
                if not isinstance(stop, Const):
                    go_on = self.scope.emit('Not', [stop], ~stop.example)
                    cond = logical(self.scope, 'And', go_on, cond, site)
                if isinstance(cond, Const):
                    if not cond.value:
                        break
                    self.unrolling.count(1, site)
                    frame.env[CONTINUED] = Const(False)
                    self.block(frame, node.body)
                    continue
                frame.env[BROKE] = Const(False)
                self.dynamic_loop(frame, None, lambda: self.expr(frame, node.test),
                                  lambda i: None, node.body, site, initial_cond=cond)
                break

    # -- loops and branches ----------------------------------------------------
    def unroll(self, frame, binders, body, site):
        """A loop of a trip count known at export time, one copy of ``body``
        per element (``binders`` bind the loop variables)."""
        for k, bind in enumerate(binders):
            stop = self.exited(frame, (RETURNED, BROKE))
            if isinstance(stop, Const) and stop.value:
                return
            if not isinstance(stop, Const):
                rest = binders[k:]
                self.dynamic_if(frame, stop, lambda: None,
                                lambda rest=rest: self.unroll(frame, rest, body, site), site)
                return
            frame.env[CONTINUED] = Const(False)
            bind()
            self.block(frame, body)
        frame.env[CONTINUED] = Const(False)

    def dynamic_loop(self, frame, trip, cond_fn, bind, body, site, initial_cond=None):
        """An ONNX Loop running ``body`` ``trip`` times (None: until
        ``cond_fn()`` is false), binding the loop variables with
        ``bind(iteration Tensor)``.  Names the body rebinds are carried; the
        body is translated again until their specs stop changing."""
        limits.check_subgraph_depth(self.scope, site)
        initial, specs = frame.env, {}
        for _ in range(cf.MAX_LOOP_TYPE_ROUNDS):
            loop = cf.LoopBody(self.scope, specs, initial, self.binding)
            with self.translating(frame, loop.scope, loop.env):
                frame.env[BROKE] = frame.env[CONTINUED] = Const(False)
                bind(loop.iteration)
                self.block(frame, body)
                out = frame.env
            widened = loop.widened(out, initial, self.binding, site, skip=(BROKE, CONTINUED))
            if widened == specs:
                break
            specs = {**specs, **widened}
        else:
            raise TranslationError(site, 'the loop-carried values do not settle on one type')
        with self.translating(frame, loop.scope, out):  # the body's "go on" output
            stop = self.exited(frame, (RETURNED, BROKE))
            go_on = Const(not stop.value) if isinstance(stop, Const) else \
                self.scope.emit('Not', [stop], ~stop.example)
            if cond_fn is not None and not (isinstance(go_on, Const) and not go_on.value):
                go_on = logical(self.scope, 'And', go_on, truth(self.scope, cond_fn(), site),
                                site)
        frame.env = {**initial, **cf.make_loop(loop, go_on, out, trip, initial_cond, initial,
                                               self.binding, site),
                     BROKE: initial.get(BROKE, Const(False)),
                     CONTINUED: initial.get(CONTINUED, Const(False))}

    def dynamic_if(self, frame, cond, then_fn, else_fn, site):
        """An ONNX If on bool Tensor ``cond``: each branch function
        translates into its own body; names they bind differently are the
        If's outputs."""
        limits.check_subgraph_depth(self.scope, site)
        branches = []
        for fn in (then_fn, else_fn):
            with self.translating(frame, self.scope.child(), cf.fork(frame.env)):
                fn()
                branches.append((frame.env, self.scope))
        known, specs = cf.merge_branches(branches[0][0], branches[1][0], self.binding, site,
                                         optional=(RET,))
        frame.env = {**known, **cf.make_if(self.scope, cond, branches, specs, site)}

    # -- assignment ------------------------------------------------------------
    def assign(self, frame, target, value):
        if isinstance(target, ast.Name):
            frame.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = items_of(self.scope, value, self.site(frame, target), len(target.elts))
            if len(items) != len(target.elts):
                raise self.error(frame, target, 'cannot unpack %d values into %d names'
                                 % (len(items), len(target.elts)))
            for t, v in zip(target.elts, items):
                self.assign(frame, t, v)
        elif isinstance(target, ast.Attribute) and isinstance(
                owner := self.expr(frame, target.value), PyObject):
            self.check_object_scope(frame, target, owner, 'setting %s.%s'
                                    % (owner.cls.__name__, target.attr))
            owner.attrs[target.attr] = value
            if isinstance(value, PyList):
                self.held_lists[id(value)] = (value, owner)
        elif isinstance(target, ast.Attribute) and isinstance(owner, Const):
            # a local of the translation, as the issue asks: later reads, in
            # this call and in later calls on the same object, see it; the
            # model keeps its own value
            self.attributes.assign(frame.env, owner.value, target.attr, value)
        elif isinstance(target, ast.Subscript):
            container = self.expr(frame, target.value)
            key = self.expr(frame, target.slice)
            if isinstance(container, (PyList, PyDict)) and isinstance(key, Const):
                container.items[key.value] = value
            else:
                raise self.error(frame, target, 'item assignment to %s is not supported'
                                 % container.kind)
        else:
            raise self.error(frame, target, 'assignment to %s is not supported'
                             % _construct(target))

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
            return wrap(self.scope, frame.globals[node.id])
        if hasattr(builtins, node.id):
            return Const(getattr(builtins, node.id))
        raise self.error(frame, node, "name '%s' is not defined" % node.id)

    def expr_Attribute(self, frame, node):
        value = self.expr(frame, node.value)
        site = self.site(frame, node)
        if isinstance(value, Const):
            key = AttributeBindings.key(value.value, node.attr)
            if key in frame.env:
                bound = frame.env[key]
                if isinstance(bound, cf.Undefined):
                    raise self.error(frame, node, "'%s' is bound on some paths only" % key)
                return bound
            try:
                return wrap(self.scope, getattr(value.value, node.attr))
            except AttributeError:
                raise self.error(frame, node, '%s has no attribute %r'
                                 % (type(value.value).__name__, node.attr)) from None
        if isinstance(value, Tensor):
            # A method of ndarray is called (the tensor's own handler, or
            # the list of those), anything else is read as an attribute.
            if callable(getattr(numpy.ndarray, node.attr, None)):
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
        return wrap(self.scope, getattr(obj.cls, node.attr))

    def expr_Tuple(self, frame, node):
        return PyTuple(tuple(self.starred(frame, node.elts)))

    def expr_List(self, frame, node):
        return PyList(self.starred(frame, node.elts))

    def starred(self, frame, elts):
        items = []
        for e in elts:
            if isinstance(e, ast.Starred):
                items.extend(items_of(self.scope, self.expr(frame, e.value), self.site(frame, e)))
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
            one = is_none(self.scope, op, left, right)
            if one is None:
                one = compare(self.scope, op, _operand(left), _operand(right), site)
            result = one if result is None else logical(self.scope, 'And', result, one, site)
            left = right
        return result

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
            acc = t if acc is None else logical(self.scope, op, acc, t, site)
        return acc

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
        """``[element for ... in ... if ...]``, translated as the loops it
        stands for, appending to a fresh list; its names stay local."""
        self.comprehensions += 1
        key = '$comprehension_%d' % self.comprehensions
        body = ast.Expr(ast.Call(func=ast.Attribute(ast.Name(key, ast.Load()), 'append',
                                                    ast.Load()),
                                 args=[node.elt], keywords=[]))
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
        targets = {n.id for g in node.generators for n in ast.walk(g.target)
                   if isinstance(n, ast.Name)}
        with _local_names(frame, targets | {key}):
            frame.env[key] = PyList([])
            self.stmt(frame, body)
            return frame.env.pop(key)

    expr_GeneratorExp = expr_ListComp

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
            dtype = cf.elements(container)[0]
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
            return sequence_item(self.scope, container, key, site)
        if isinstance(container, Const):
            if is_constant(key):
                try:
                    return wrap(self.scope, container.value[constant_value(key)])
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
        if isinstance(callee, Closure):
            return self.call_function(callee, args, kwargs, site)
        if isinstance(callee, BoundMethod):
            return self.call_method(frame, callee, args, kwargs, site)
        if not isinstance(callee, Const):
            raise self.error(frame, node, '%s is not callable' % callee.kind)
        fn, call = callee.value, Call(self.scope, args, kwargs, site)
        builtin = BUILTINS.get(fn) if _hashable(fn) else None
        if builtin is not None:
            return builtin(call)
        for applies, run in _CALLEES:
            if applies(fn, call):
                return run(self, fn, call)
        raise call.error('calling %s is not supported'
                         % getattr(fn, '__qualname__', type(fn).__name__))

    def call_method(self, frame, method, args, kwargs, site):
        """``target.name(...)``: a PyObject's method inlined, else the
        method the value owns (``values.Value.call_method``)."""
        target, name, node = method.target, method.name, method.target_node
        if isinstance(target, PyObject):
            return self.call_function(getattr(target.cls, name), args, kwargs, site,
                                      self_value=target)
        if isinstance(target, PyList) and id(target) in self.held_lists:
            owner = self.held_lists[id(target)][1]
            self.check_object_scope(frame, node, owner, 'changing a list attribute of %s'
                                    % owner.cls.__name__)
        rebind = (lambda value: frame.env.__setitem__(node.id, value)) \
            if isinstance(node, ast.Name) else None
        return target.call_method(name, Call(self.scope, args, kwargs, site,
                                             '%s.%s' % (target.kind, name), rebind))

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

    def check_object_scope(self, frame, node, obj, what):
        """Refuse to change PyObject ``obj`` (``what`` says how) from the body
        of a branch or loop that it was made outside of."""
        if self.scope is not obj.scope:
            raise self.error(frame, node, '%s inside a branch or loop that depends on the '
                             'inputs is not supported when the %s object was made outside it'
                             % (what, obj.cls.__name__))


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


def _constant_arguments(call):
    return all(is_constant(a) for a in list(call.args) + list(call.kwargs.values()))


def _construct_object(tr, cls, call):
    """``cls(...)`` of a plain Python class: a PyObject whose ``__init__``
    is inlined."""
    obj = PyObject(cls, tr.scope)
    if cls.__init__ is not object.__init__:
        tr.call_function(cls.__init__, call.args, call.kwargs, call.site, self_value=obj)
    elif call.args or call.kwargs:
        raise call.error('%s() takes no arguments' % cls.__name__)
    return obj


def _call_link(tr, link, call):
    """A Chainer link without user-defined children is converted whole;
    any other link's forward is translated from its source."""
    if _is_chainer_builtin(link) and not any(not _is_chainer_builtin(child)
                                             for child in link.links(skipself=True)) \
            and not isinstance(link, chainer.links.Classifier):
        return tr.chainer_call(link, call.args, call.kwargs, call.site)
    forward, self_value = _forward_of(link, call.site)
    return tr.call_function(forward, call.args, call.kwargs, call.site, self_value=self_value)


def _is_user_link_method(fn, call):
    return isinstance(fn, types.MethodType) and isinstance(fn.__self__, chainer.Link) and \
        not fn.__func__.__module__.startswith('chainer.')


def _is_link_iterator(fn, call):
    """A Link method walking the model's structure, fixed at export time:
    its list of links (or parameters) is a constant a for loop unrolls."""
    return isinstance(fn, types.MethodType) and isinstance(fn.__self__, chainer.Link) and \
        fn.__name__ in _LINK_ITERATORS and _constant_arguments(call)


def _module(fn):
    return getattr(fn, '__module__', None) or ''


#: What calling a constant ``fn`` that is not one of BUILTINS runs, by the
#: kind of callable: (applies(fn, call), run(translator, fn, call)), the
#: first that applies.
_CALLEES = [
    (lambda fn, call: isinstance(fn, chainer.Link), _call_link),
    (lambda fn, call: _is_plain_class(fn), _construct_object),
    (lambda fn, call: isinstance(fn, type) and issubclass(fn, chainer.FunctionNode) and
     _constant_arguments(call),
     lambda tr, fn, call: call_at_export_time(fn, call)),
    (lambda fn, call: isinstance(fn, types.MethodType) and
     isinstance(fn.__self__, chainer.FunctionNode),  # a user's FunctionNode.apply
     lambda tr, fn, call: tr.chainer_call(fn, call.args, call.kwargs, call.site)),
    (_is_user_link_method,
     lambda tr, fn, call: tr.call_function(fn.__func__, call.args, call.kwargs, call.site,
                                           self_value=Const(fn.__self__))),
    (_is_link_iterator,
     lambda tr, fn, call: Const(list(constant_value(call_at_export_time(fn, call))))),
    (lambda fn, call: isinstance(fn, numpy.ufunc) or
     _module(fn).split('.')[0] in ('numpy', 'cupy'),
     lambda tr, fn, call: call_numpy(tr.scope, fn.__name__, call.args, call.kwargs, call.site)),
    (lambda fn, call: _module(fn).startswith(('chainer.functions', 'chainer.links')),
     lambda tr, fn, call: tr.chainer_call(fn, call.args, call.kwargs, call.site)),
    (lambda fn, call: isinstance(fn, types.FunctionType),
     lambda tr, fn, call: tr.call_function(fn, call.args, call.kwargs, call.site)),
]


@contextlib.contextmanager
def _loop_flags(frame):
    """A loop's own break and continue flags: the enclosing loop's are back
    on leaving it."""
    outer = frame.env.get(BROKE, Const(False)), frame.env.get(CONTINUED, Const(False))
    frame.env[BROKE] = Const(False)
    try:
        yield
    finally:
        frame.env[BROKE], frame.env[CONTINUED] = outer


@contextlib.contextmanager
def _local_names(frame, names):
    """``names`` bound in this block only (a comprehension's variables):
    their bindings before are back on leaving it."""
    saved = {name: frame.env[name] for name in names if name in frame.env}
    try:
        yield
    finally:
        for name in names:
            if name in saved:
                frame.env[name] = saved[name]
            else:
                frame.env.pop(name, None)


def _refuse_loop_else(translator, frame, node):
    if node.orelse:
        raise translator.error(frame, node, 'else clauses of loops are not supported')


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
        result = range_sequence(root, result, '<export>')
    items = list(result.items) if isinstance(result, PyTuple) else (
        list(result.items.values()) if isinstance(result, PyDict) else [result])
    taken = {**state_names, **{name: 'an input' for name in in_names}}
    out_names = _names(output_names, len(items), 'output', 'output_names', taken)
    graph_outputs = [_graph_output(root, name, item)
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
            shape = cf.merge_shapes(shape, a.shape)
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


def _graph_output(root, name, value):
    """Make ``value`` graph output ``name``; return its ValueInfoProto."""
    site = '<the value forward returns>'
    if isinstance(value, Const) and value.value is None:
        value = Const(False)
    if isinstance(value, (PyList, PyTuple, Sequence, RangeValue)):
        if isinstance(value, RangeValue):
            value = range_sequence(root, value, site)
        if not isinstance(value, Sequence):
            dtype = cf.elements(value)[0]
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
