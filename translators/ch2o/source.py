"""The Python source of the functions ch2o translates, as ASTs whose line
numbers are the file's own, so errors can name the user's file and line."""
import ast
import functools
import inspect
import textwrap

from .values import TranslationError


@functools.lru_cache(maxsize=None)
def _parse(code):
    """(module AST, file name) of the source that defines ``code``."""
    filename = code.co_filename
    try:
        lines, first = inspect.findsource(code)
    except (OSError, TypeError) as e:
        raise TranslationError('%s:%d' % (filename, code.co_firstlineno),
                               'the source of %s() cannot be read (%s); ch2o translates '
                               'Python source' % (code.co_name, e)) from None
    block = inspect.getblock(lines[first:])
    tree = ast.parse(textwrap.dedent(''.join(block)), filename=filename)
    ast.increment_lineno(tree, first)
    return tree, filename


def function_ast(fn):
    """(the FunctionDef or Lambda node of Python function ``fn``, its file
    name).  Bound methods are unwrapped."""
    fn = inspect.unwrap(getattr(fn, '__func__', fn))
    code = fn.__code__
    tree, filename = _parse(code)
    if fn.__name__ == '<lambda>':
        nodes = [n for n in ast.walk(tree)
                 if isinstance(n, ast.Lambda) and n.lineno == code.co_firstlineno]
    else:  # the block starts at the first decorator; take the outermost def
        nodes = [n for n in tree.body
                 if isinstance(n, ast.FunctionDef) and n.name == fn.__name__][:1]
    if len(nodes) != 1:
        raise TranslationError('%s:%d' % (filename, code.co_firstlineno),
                               'cannot tell which %s on this line to translate (%d candidates)'
                               % ('lambda' if fn.__name__ == '<lambda>' else fn.__name__,
                                  len(nodes)))
    return nodes[0], filename
