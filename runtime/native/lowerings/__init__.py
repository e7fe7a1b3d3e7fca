"""The lowerings of every op family, one module per family (its kernels are
kernels/ccn_<family>.c and .h).  Importing this package imports every
module in it, which attaches their lowerings to the operators' records (lowering.lowers)."""
import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module('%s.%s' % (__name__, _module.name))
