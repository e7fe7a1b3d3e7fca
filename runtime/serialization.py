"""Saving and loading Programs.

A Program file is a NumPy ``.npz`` archive: one entry holds the program as
JSON (instructions, attributes, names, a format version), the others hold the
constant and tensor-attribute arrays.  Loading uses ``allow_pickle=False`` and
plain JSON, so reading a file never executes code from it.
"""
import base64
import json
import zipfile

import numpy

from .errors import ProgramFormatError
from .program import Instruction, Program, ValueInfo

FORMAT_NAME = 'chainer-compiler-program'
FORMAT_VERSION = 1
_HEADER_KEY = 'program.json'


def save_program(program, path):
    """Write ``program`` and its constants to ``path`` (a .npz archive)."""
    arrays = {}
    header = {'format': FORMAT_NAME, 'version': FORMAT_VERSION,
              'program': _encode_program(program, arrays)}
    arrays[_HEADER_KEY] = numpy.frombuffer(
        json.dumps(header).encode('utf-8'), dtype=numpy.uint8)
    with open(path, 'wb') as f:
        numpy.savez(f, **arrays)


def load_program(path):
    """Read a Program written by save_program.  Raises ProgramFormatError
    (naming the file) when it is not a Program file, comes from an
    incompatible version, or is damaged."""
    try:
        with numpy.load(path, allow_pickle=False) as archive:
            if _HEADER_KEY not in archive.files:
                raise ProgramFormatError('%s is not a chainer-compiler Program file '
                                         '(no %s entry)' % (path, _HEADER_KEY))
            header = json.loads(bytes(archive[_HEADER_KEY]).decode('utf-8'))
            if not isinstance(header, dict) or header.get('format') != FORMAT_NAME:
                raise ProgramFormatError('%s is not a chainer-compiler Program file' % path)
            if header.get('version') != FORMAT_VERSION:
                raise ProgramFormatError(
                    '%s has Program format version %r; this chainer-compiler reads version %d'
                    % (path, header.get('version'), FORMAT_VERSION))
            return _decode_program(header['program'], archive)
    except ProgramFormatError:
        raise
    except FileNotFoundError:
        raise ProgramFormatError('Program file %s does not exist' % path) from None
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile,
            UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProgramFormatError('%s is damaged or not a Program file: %s: %s'
                                 % (path, type(e).__name__, e)) from e


# -- encoding ------------------------------------------------------------
def _store_array(value, arrays):
    value = numpy.asarray(value)
    if value.dtype == object:
        return {'strings': [_to_str(s) for s in value.ravel().tolist()],
                'shape': list(value.shape)}
    key = 'a%d' % len(arrays)
    if value.dtype.isbuiltin == 0 or value.dtype.kind == 'V':
        # Extension dtypes (bfloat16, float8 ...) are stored as raw bytes.
        arrays[key] = numpy.ascontiguousarray(value).view(numpy.uint8)
        return {'array': key, 'raw_dtype': value.dtype.name, 'shape': list(value.shape)}
    arrays[key] = value
    return {'array': key}


def _to_str(s):
    return s.decode('utf-8') if isinstance(s, bytes) else str(s)


def _encode_value(value, arrays):
    if isinstance(value, Program):
        return {'program': _encode_program(value, arrays)}
    if isinstance(value, numpy.dtype):
        return {'dtype': value.name}
    if isinstance(value, (numpy.ndarray, numpy.generic)):
        return _store_array(value, arrays)
    if isinstance(value, bytes):
        return {'bytes': base64.b64encode(value).decode('ascii')}
    if isinstance(value, (list, tuple)):
        return {'list': [_encode_value(v, arrays) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {'value': value}
    raise ProgramFormatError('cannot save attribute value of type %s' % type(value).__name__)


def _encode_program(program, arrays):
    return {
        'name': program.name,
        'num_registers': program.num_registers,
        'register_names': {str(k): v for k, v in program.register_names.items()},
        'inputs': [_encode_info(v) for v in program.inputs],
        'outputs': [_encode_info(v) for v in program.outputs],
        'constants': {str(r): _store_array(v, arrays) for r, v in program.constants.items()},
        'instructions': [{
            'op': i.op, 'domain': i.domain, 'version': i.version, 'name': i.name,
            'inputs': list(i.inputs), 'outputs': list(i.outputs), 'frees': list(i.frees),
            'captures': list(i.captures),
            'attrs': {k: _encode_value(v, arrays) for k, v in i.attrs.items()},
        } for i in program.instructions],
    }


def _encode_info(v):
    return {'name': v.name, 'register': v.register, 'kind': v.kind, 'dtype': v.dtype,
            'shape': None if v.shape is None else list(v.shape)}


# -- decoding ------------------------------------------------------------
def _load_array(entry, archive):
    if 'strings' in entry:
        return numpy.array(entry['strings'], dtype=object).reshape(entry['shape'])
    data = archive[entry['array']]
    if 'raw_dtype' in entry:
        try:
            dtype = numpy.dtype(entry['raw_dtype'])
        except TypeError:
            raise ProgramFormatError(
                'the Program holds an array of dtype %s, which NumPy alone cannot represent'
                % entry['raw_dtype']) from None
        return data.view(dtype).reshape(entry['shape'])
    return data


def _decode_value(entry, archive):
    if 'program' in entry:
        return _decode_program(entry['program'], archive)
    if 'dtype' in entry:
        return numpy.dtype(entry['dtype'])
    if 'array' in entry or 'strings' in entry:
        return _load_array(entry, archive)
    if 'bytes' in entry:
        return base64.b64decode(entry['bytes'])
    if 'list' in entry:
        return [_decode_value(v, archive) for v in entry['list']]
    return entry['value']


def _decode_program(d, archive):
    return Program(
        name=d['name'],
        num_registers=int(d['num_registers']),
        register_names={int(k): v for k, v in d['register_names'].items()},
        inputs=[_decode_info(v) for v in d['inputs']],
        outputs=[_decode_info(v) for v in d['outputs']],
        constants={int(r): _load_array(v, archive) for r, v in d['constants'].items()},
        instructions=[Instruction(
            op=i['op'], domain=i['domain'], version=int(i['version']), name=i['name'],
            inputs=tuple(i['inputs']), outputs=tuple(i['outputs']), frees=tuple(i['frees']),
            captures=tuple(i['captures']),
            attrs={k: _decode_value(v, archive) for k, v in i['attrs'].items()})
            for i in d['instructions']])


def _decode_info(d):
    return ValueInfo(name=d['name'], register=int(d['register']), kind=d['kind'],
                     dtype=d['dtype'], shape=None if d['shape'] is None else tuple(d['shape']))
