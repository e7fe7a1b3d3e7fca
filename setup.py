"""chainer-compiler: Chainer models -> ONNX -> a register VM on NumPy/CuPy.

Three install tiers (see README: Set-up):

  pip install PATH              the runtime, emit-c and the native backend (NumPy only)
  pip install 'PATH[onnx]'      adds ONNX: compile ONNX files from any exporter
  pip install 'PATH[chainer]'   everything: export, ch2o, compile_onnx, the examples
"""
import pathlib
import re

from setuptools import find_packages, setup

# runtime/ and translators/ sit at the top of the repository (the layout the
# architecture asks for) but install inside the chainer_compiler namespace,
# so nothing generic like 'runtime' lands at the top of site-packages.
PACKAGE_ROOTS = {
    'chainer_compiler': 'chainer_compiler',
    'chainer_compiler.runtime': 'runtime',
    'chainer_compiler.translators': 'translators',
}
HERE = pathlib.Path(__file__).resolve().parent
# One place for the version: chainer_compiler.__version__.
VERSION = re.search(r"^__version__ = '([^']+)'$",
                    (HERE / 'chainer_compiler' / '__init__.py').read_text(), re.M).group(1)

ONNX = ['onnx>=1.22,<2', 'ml-dtypes>=0.5,<0.6']


def mapped_packages():
    packages, package_dir = [], {}
    for name, folder in PACKAGE_ROOTS.items():
        packages.append(name)
        package_dir[name] = folder
        for sub in find_packages(folder):
            packages.append('%s.%s' % (name, sub))
            package_dir['%s.%s' % (name, sub)] = '%s/%s' % (folder, sub.replace('.', '/'))
    return packages, package_dir


packages, package_dir = mapped_packages()

setup(
    name='chainer-compiler',
    version=VERSION,
    description='Compile Chainer models through ONNX into a register VM running on NumPy or CuPy',
    python_requires='>=3.11,<3.14',
    packages=packages,
    package_dir=package_dir,
    # The native backend's C kernels and main.c template are copied into
    # every emitted model folder, so they must install with the package.
    # The CuPy backend compiles its raw CUDA kernels from source at run time.
    package_data={'chainer_compiler.runtime.native': ['kernels/*.c', 'kernels/*.h',
                                                      'kernels/*.c.in'],
                  'chainer_compiler.runtime.ops': ['cuda/*.cu']},
    # The runtime, emit-c of a saved Program and the native backend need
    # NumPy alone (tests/test_install_tiers.py checks each tier).
    install_requires=['numpy>=1.26,<3'],
    extras_require={
        'onnx': ONNX,
        # Chainer 7.8.1 imports pkg_resources (gone from setuptools 74) and
        # NumPy 1.x aliases; onnxruntime runs ch2o's loop bodies.
        'chainer': ONNX + ['chainer==7.8.1', 'numpy<2', 'setuptools<74', 'onnxruntime>=1.22'],
        'cuda': ['cupy-cuda12x==13.6.0'],
        'test': ['pytest', 'hypothesis'],
        'docs': ['pdoc>=16'],
    },
    entry_points={'console_scripts': ['chainer-compiler=chainer_compiler.cli:main']},
)
