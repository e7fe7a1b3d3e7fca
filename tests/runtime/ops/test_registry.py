import inspect
import numbers

from chainer_compiler.runtime.ops import lookup, registered_kernels


def test_inputs_of_a_kernel_are_not_attributes():
    assert lookup('Transpose').attribute_names == {'perm'}  # was {'perm', 'x'}
    for spec in registered_kernels():
        positional = [p.name for p in inspect.signature(spec.fn).parameters.values()
                      if p.kind != p.KEYWORD_ONLY]
        assert not spec.attribute_names & set(positional), spec.op


def test_attribute_types_follow_the_defaults():
    assert lookup('Flatten').attribute_types == {'axis': numbers.Integral}
    assert lookup('LeakyRelu').attribute_types['alpha'] is numbers.Real
    assert lookup('Gelu').attribute_types == {'approximate': str}
    assert lookup('LSTM').attribute_types['activations'] == (list, tuple)
    assert lookup('Cast', version=13).attribute_types['to'] is object  # no default
    assert lookup('Transpose').attribute_types == {'perm': object}  # default None
