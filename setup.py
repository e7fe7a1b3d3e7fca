"""chainer-compiler: Chainer models -> ONNX -> a register VM on NumPy/CuPy."""
from setuptools import find_packages, setup

# runtime/ and translators/ sit at the top of the repository (the layout the
# architecture asks for) but install inside the chainer_compiler namespace,
# so nothing generic like 'runtime' lands at the top of site-packages.
PACKAGE_ROOTS = {
    'chainer_compiler': 'chainer_compiler',
    'chainer_compiler.runtime': 'runtime',
    'chainer_compiler.translators': 'translators',
}


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
    version='0.1.0',
    description='Compile Chainer models through ONNX into a register VM running on NumPy or CuPy',
    python_requires='>=3.11,<3.12',
    packages=packages,
    package_dir=package_dir,
    # The native backend's C kernels and main.c template are copied into
    # every emitted model folder, so they must install with the package.
    package_data={'chainer_compiler.runtime.native': ['kernels/*.c', 'kernels/*.h',
                                                      'kernels/*.c.in']},
    install_requires=[
        'numpy==1.26.4',
        'chainer==7.8.1',
        'onnx==1.22.0',
        'ml-dtypes<0.6',
        'onnxruntime==1.31.1',
    ],
    extras_require={
        'cuda': ['cupy-cuda12x==13.6.0'],
        'test': ['pytest', 'hypothesis'],
    },
    entry_points={'console_scripts': ['chainer-compiler=chainer_compiler.cli:main']},
)
