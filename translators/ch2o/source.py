"""The Python source of the functions ch2o translates, as ASTs whose line
numbers are the file's own, so errors can name the user's file and line.

The source is read from the file (through ``linecache``), so it is only
translated after checking that it still compiles to the code that runs: a
file edited after its module was imported would otherwise give a graph of
the new text while the model runs the old."""
import __future__

import ast
import functools
import inspect
import textwrap
import types

from .values import TranslationError

#: The ``from __future__`` features a code object records in its flags:
#: compiling the file again with them reproduces the code exactly.
_FUTURE_FLAGS = functools.reduce(
    lambda flags, name: flags | getattr(__future__, name).compiler_flag,
    __future__.all_feature_names, 0)


@functools.lru_cache(maxsize=None)
def _parse(code, filename):
    """(module AST, file name) of the source that defines ``code``, compiled
    from file ``filename`` (a key of the cache too: equal code objects of two
    files are equal)."""
    site = '%s:%d' % (filename, code.co_firstlineno)
    try:
        lines, first = inspect.findsource(code)
    except (OSError, TypeError) as e:
        raise TranslationError(site, 'the source of %s() cannot be read (%s); ch2o translates '
                               'Python source' % (code.co_name, e)) from None
    if code not in _code_objects(''.join(lines), filename, code.co_flags & _FUTURE_FLAGS):
        raise TranslationError(site, 'the code of %s() that runs is not what %s compiles to '
                               'now: the file changed after its module was imported (or the '
                               'function was compiled from other text); import it again '
                               'before exporting' % (code.co_name, filename))
    block = inspect.getblock(lines[first:])
    try:
        tree = ast.parse(textwrap.dedent(''.join(block)), filename=filename)
    except (SyntaxError, RecursionError, MemoryError) as e:
        raise TranslationError(site, 'the source of %s() cannot be parsed on its own (%s)'
                               % (code.co_name, type(e).__name__)) from None
    ast.increment_lineno(tree, first)
    return tree, filename


@functools.lru_cache(maxsize=16)
def _code_objects(text, filename, flags):
    """Every code object (the module's, its classes', functions' and
    lambdas', nested ones too) that source ``text`` compiles to, as Python
    compiles a module on import; empty if it no longer compiles."""
    try:
        module = compile(text, filename, 'exec', flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    found, pending = set(), [module]
    while pending:
        code = pending.pop()
        found.add(code)
        pending.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return frozenset(found)


def function_ast(fn):
    """(the FunctionDef or Lambda node of Python function ``fn``, its file
    name).  Bound methods are unwrapped; a decorated function is not: its
    own code is what runs (a ``functools.wraps`` wrapper's ``__wrapped__``
    is only what the wrapper calls)."""
    fn = getattr(fn, '__func__', fn)
    code = fn.__code__
    tree, filename = _parse(code, code.co_filename)
    name = code.co_name  # wraps() renames the wrapper, not its code
    if name == '<lambda>':
        nodes = [n for n in ast.walk(tree)
                 if isinstance(n, ast.Lambda) and n.lineno == code.co_firstlineno]
    else:  # the block starts at the first decorator; take the outermost def
        nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name][:1]
    if len(nodes) != 1:
        raise TranslationError('%s:%d' % (filename, code.co_firstlineno),
                               'cannot tell which %s on this line to translate (%d candidates)'
                               % ('lambda' if name == '<lambda>' else name, len(nodes)))
    return nodes[0], filename
