"""The project's layering, checked on every import statement (relative ones
resolved):

- runtime/ imports only the standard library, NumPy and CuPy, so a saved
  Program runs where neither Chainer nor ONNX is installed;
- Chainer is imported only by the Chainer bridge modules and the translators;
- translators import from the compiler only its ONNX-building leaf module,
  and runtime leaf modules (those importing nothing from the project, such
  as the version rules the kernels share with converters and gradient rules).
"""
import ast
import functools
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: Source folder -> the package it installs as (see setup.py).
PACKAGES = {'chainer_compiler': 'chainer_compiler',
            'runtime': 'chainer_compiler.runtime',
            'translators': 'chainer_compiler.translators'}
CHAINER_PACKAGES = {'chainer', 'chainerx', 'chainermn', 'cupy_chainer'}
CUPY_PACKAGES = {'cupy', 'cupyx', 'cupy_backends'}
#: Modules of chainer_compiler/ that are the bridge to Chainer.
CHAINER_BRIDGE = {'chainer_compiler.exporting', 'chainer_compiler.compiled_model',
                  'chainer_compiler.parameter_pack', 'chainer_compiler.training_step',
                  'chainer_compiler.datasets', 'chainer_compiler.allocators'}
#: What translators may import from the rest of the project.
TRANSLATOR_MAY_IMPORT = {'chainer_compiler.onnx_builder'}


def _modules():
    """(module name, path) of every project module."""
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob('*.py')):
            parts = path.relative_to(ROOT / folder).with_suffix('').parts
            if parts[-1] == '__init__':
                parts = parts[:-1]
            yield '.'.join((package,) + parts), path


@functools.lru_cache(maxsize=None)  # each file is parsed once per run, not once per test
def imports_of(module, path):
    """Absolute names of every module ``path`` imports (``from a import b``
    counts as ``a`` and ``a.b``; the import machinery resolves either)."""
    is_package = path.name == '__init__.py'
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = module.split('.')
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                base = '.'.join(anchor + ([base] if base else []))
            names.add(base)
            names.update('%s.%s' % (base, alias.name) for alias in node.names)
    return frozenset(names)


def _top(name):
    return name.split('.')[0]


def _project_modules():
    return {name for name, _ in _modules()}


MODULES = list(_modules())


def test_the_top_level_layout_is_the_designed_one():
    for entry in ('chainer_compiler', 'runtime', 'translators', 'examples', 'tests'):
        assert (ROOT / entry).is_dir(), entry
    assert (ROOT / 'setup.py').is_file()


def test_relative_imports_resolve_to_project_modules():
    known = _project_modules()
    for module, path in MODULES:
        for name in imports_of(module, path):
            if name.startswith('chainer_compiler.') and name not in known:
                # ``from .x import y``: y is a function or class of x.
                assert name.rsplit('.', 1)[0] in known, '%s imports unknown %s' % (module, name)


@pytest.mark.parametrize('module, path', [m for m in MODULES
                                          if m[0].startswith('chainer_compiler.runtime')],
                         ids=lambda v: v if isinstance(v, str) else '')
def test_runtime_imports_only_the_standard_library_numpy_and_cupy(module, path):
    # cupy_backends ships inside CuPy's wheel (its cuBLAS binding).
    allowed_outside = set(sys.stdlib_module_names) | {'numpy'} | CUPY_PACKAGES
    bad = sorted(n for n in imports_of(module, path)
                 if not n.startswith('chainer_compiler.runtime')
                 and _top(n) not in allowed_outside)
    assert bad == [], '%s imports %s' % (module, ', '.join(bad))


def test_only_the_bridge_and_the_translators_import_chainer():
    offenders = sorted(module for module, path in MODULES
                       if module not in CHAINER_BRIDGE
                       and not module.startswith('chainer_compiler.translators')
                       and {_top(n) for n in imports_of(module, path)} & CHAINER_PACKAGES)
    assert offenders == []


def _runtime_leaves():
    """Runtime modules that import nothing from the project."""
    return {module for module, path in MODULES
            if module.startswith('chainer_compiler.runtime.')
            and not any(n.startswith('chainer_compiler') for n in imports_of(module, path))}


def test_translators_import_from_the_compiler_only_its_onnx_building_module():
    project = _project_modules()
    allowed = TRANSLATOR_MAY_IMPORT | _runtime_leaves()
    for module, path in MODULES:
        if not module.startswith('chainer_compiler.translators'):
            continue
        outside = {n for n in imports_of(module, path)
                   if n.startswith('chainer_compiler')
                   and not n.startswith('chainer_compiler.translators')}
        # ``from ...onnx_builder import GraphBuilder`` names the module and its members.
        modules = {n for n in outside if n in project}
        assert modules <= allowed, '%s imports %s' % (module, sorted(modules))


def test_the_onnx_building_module_is_a_leaf():
    project, leaves = _project_modules(), _runtime_leaves()
    for name in TRANSLATOR_MAY_IMPORT:
        path = dict(MODULES)[name]
        assert not {n for n in imports_of(name, path) if n in project} - leaves


def test_the_checks_see_relative_imports(tmp_path):
    path = tmp_path / 'm.py'
    path.write_text('from .errors import E\nfrom ..errors import X\nfrom . import ops\n'
                    'import json\n')
    assert imports_of('chainer_compiler.runtime.executor', path) == {
        'chainer_compiler.runtime.errors', 'chainer_compiler.runtime.errors.E',
        'chainer_compiler.errors', 'chainer_compiler.errors.X',
        'chainer_compiler.runtime', 'chainer_compiler.runtime.ops', 'json'}


#: Import cycles allowed for now, each a package whose modules import one
#: another lazily: ch2o's values, operators and calls (issue 30 restructures
#: ch2o; drop the entry when its cycle is gone).
CYCLES_ALLOWED_WITHIN = ('chainer_compiler.translators.ch2o.',)


def import_cycles(modules):
    """The import cycles among ``modules`` ({name: path}): each a sorted
    list of modules that import one another, directly or not.  Imports in
    function bodies count (they close the cycle when the function runs); a
    module importing the package it lies in does not (its ``__init__`` has
    run first)."""
    edges = {m: sorted(n for n in imports_of(m, path)
                       if n in modules and n != m and not m.startswith(n + '.'))
             for m, path in modules.items()}
    # Tarjan's strongly connected components, iterative.
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, pending = work[-1]
            for n in pending:
                if n not in index:
                    index[n] = low[n] = len(index)
                    stack.append(n)
                    on_stack.add(n)
                    work.append((n, iter(edges[n])))
                    break
                if n in on_stack:
                    low[module] = min(low[module], index[n])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        n = stack.pop()
                        on_stack.discard(n)
                        component.append(n)
                        if n == module:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_modules_import_one_another_without_cycles():
    cycles = [c for c in import_cycles(dict(MODULES))
              if not all(m.startswith(CYCLES_ALLOWED_WITHIN) for m in c)]
    assert cycles == [], 'import cycles: %s' % '; '.join(' <-> '.join(c) for c in cycles)


def test_the_cycle_check_sees_imports_in_function_bodies(tmp_path):
    (tmp_path / 'front.py').write_text('def build():\n    from .pipe import run\n')
    (tmp_path / 'pipe.py').write_text('from .front import build\n')
    (tmp_path / 'leaf.py').write_text('from . import front\n')
    modules = {'p.' + name: tmp_path / (name + '.py') for name in ('front', 'pipe', 'leaf')}
    assert import_cycles(modules) == [['p.front', 'p.pipe']]


NATIVE = 'chainer_compiler.runtime.native'
#: What the VM core and the kernels may import from the native backend: its
#: runner (the Executor's backend='native') with its thread count, and
#: backend='auto''s choice; the compiler to C stays behind them.
NATIVE_ENTRY = {NATIVE + '.library', NATIVE + '.library.NativeRun',
                NATIVE + '.library.native_threads', NATIVE + '.auto',
                NATIVE + '.auto.choose_backend'}


def _in_native(name):
    return name == NATIVE or name.startswith(NATIVE + '.')


@pytest.mark.parametrize('module, path', [m for m in MODULES if _in_native(m[0])],
                         ids=lambda v: v if isinstance(v, str) else '')
def test_the_native_backend_imports_only_the_runtime_and_no_gpu(module, path):
    # It lives in the runtime so that a saved Program compiles to C where only
    # the runtime is installed (docs/native.md): nothing from the compiler,
    # and no CuPy (the C runs on the CPU).
    bad = sorted(n for n in imports_of(module, path)
                 if (n.startswith('chainer_compiler') and not n.startswith(
                     'chainer_compiler.runtime')) or _top(n) in CUPY_PACKAGES)
    assert bad == [], '%s imports %s' % (module, ', '.join(bad))


def test_the_vm_reaches_the_native_backend_only_through_its_runner():
    for module, path in MODULES:
        if module.startswith('chainer_compiler.runtime') and not _in_native(module):
            native = {n for n in imports_of(module, path) if _in_native(n)}
            assert native <= NATIVE_ENTRY, '%s imports %s' % (module, sorted(native))
