"""Saving and loading Programs.

A Program file is a NumPy ``.npz`` archive: one entry holds the program as
JSON (instructions, attributes, names, register types, a format version;
files written before register types were stored still load, with every
register's type unknown, as readers ignore what they do not know), the others hold the
constant and tensor-attribute arrays, whose dtype and shape the JSON records
too.  Loading uses ``allow_pickle=False`` and plain JSON, so reading a file
never executes code from it; it checks the archive's decompressed size
against the file's (limits.MAX_PROGRAM_INFLATION) and each array against the
JSON before reading its data, and the whole Program (validation.py) before
returning it.
"""
import base64
import json
import math
import os
import zipfile

import numpy

from .errors import ProgramFormatError
from .files import atomic_write
from .limits import MAX_PROGRAM_INFLATION
from .program import Instruction, Program, RegisterType, ValueInfo
from .validation import validate_program

FORMAT_NAME = 'chainer-compiler-program'
FORMAT_VERSION = 2
_HEADER_KEY = 'program.json'
#: Readers of the .npy header versions numpy.savez writes.
_NPY_HEADER_READERS = {(1, 0): numpy.lib.format.read_array_header_1_0,
                       (2, 0): numpy.lib.format.read_array_header_2_0}


def save_program(program: Program, path: str | os.PathLike) -> None:
    """Write ``program`` and its constants to ``path`` (a .npz archive),
    atomically: a failure leaves any earlier file at ``path`` as it was.
    Raises ProgramFormatError when the file cannot be written."""
    arrays: dict[str, numpy.ndarray] = {}
    header = {'format': FORMAT_NAME, 'version': FORMAT_VERSION,
              'program': _encode_program(program, arrays)}
    arrays[_HEADER_KEY] = numpy.frombuffer(
        json.dumps(header).encode('utf-8'), dtype=numpy.uint8)
    try:
        # numpy.savez's format, with the archive closed on an error too:
        # savez leaves it open, and its __del__ then fails on the closed file.
        with atomic_write(path) as f, zipfile.ZipFile(f, 'w') as archive:
            for name, value in arrays.items():
                with archive.open(name + '.npy', 'w', force_zip64=True) as member:
                    numpy.lib.format.write_array(member, value, allow_pickle=False)
    except OSError as e:
        raise ProgramFormatError('cannot write Program file %s: %s'
                                 % (path, e.strerror or e)) from e


def load_program(path: str | os.PathLike) -> Program:
    """Read a Program written by save_program.  Raises ProgramFormatError
    (naming the file) when it is not a Program file, comes from an
    incompatible version, is damaged, or holds a malformed Program."""
    try:
        with numpy.load(path, allow_pickle=False) as archive:
            _check_inflation(archive, path)
            header = _read_header(archive, path)
            program = _Decoder(archive, path).program(header['program'])
    except ProgramFormatError:
        raise
    except FileNotFoundError:
        raise ProgramFormatError('Program file %s does not exist' % path) from None
    except Exception as e:
        # zipfile, numpy and json each fail in their own ways on a damaged
        # file (BadZipFile, EOFError, NotImplementedError for an unknown
        # compression, zlib.error, KeyError ...); for this untrusted input
        # any of them means the same thing.
        raise ProgramFormatError('%s is damaged or not a Program file: %s: %s'
                                 % (path, type(e).__name__, e)) from e
    validate_program(program, path)
    return program


def _check_inflation(archive, path):
    """Refuse an archive whose members, decompressed, would be more than
    MAX_PROGRAM_INFLATION times the file's size."""
    size = os.path.getsize(path)
    inflated = sum(info.file_size for info in archive.zip.infolist())
    if inflated > MAX_PROGRAM_INFLATION * size:
        raise ProgramFormatError(
            '%s holds %d bytes once decompressed, more than %d times its size of %d bytes'
            % (path, inflated, MAX_PROGRAM_INFLATION, size))


def _read_header(archive, path):
    """The JSON header of ``archive``, refused unless it is that of a Program
    file of this format version."""
    if _HEADER_KEY not in archive.files:
        raise ProgramFormatError('%s is not a chainer-compiler Program file '
                                 '(no %s entry)' % (path, _HEADER_KEY))
    _npy_header(archive, path, _HEADER_KEY, 'the header')
    header = json.loads(bytes(archive[_HEADER_KEY]).decode('utf-8'))
    if not isinstance(header, dict) or header.get('format') != FORMAT_NAME:
        raise ProgramFormatError('%s is not a chainer-compiler Program file' % path)
    if header.get('version') != FORMAT_VERSION:
        raise ProgramFormatError(
            '%s has Program format version %r; this chainer-compiler reads version %d'
            % (path, header.get('version'), FORMAT_VERSION))
    return header


# -- encoding ------------------------------------------------------------
def _store_array(value, arrays):
    value = numpy.asarray(value)
    if value.dtype == object:
        return {'strings': [_to_str(s) for s in value.ravel().tolist()],
                'shape': list(value.shape)}
    key = 'a%d' % len(arrays)
    entry = {'array': key, 'dtype': value.dtype.name, 'shape': list(value.shape)}
    if value.dtype.isbuiltin == 0 or value.dtype.kind == 'V':
        # Extension dtypes (bfloat16, float8 ...) are stored as raw bytes.
        arrays[key] = numpy.ascontiguousarray(value).reshape(-1).view(numpy.uint8)
        entry['raw'] = True
    else:
        arrays[key] = value
    return entry


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
        'types': {str(r): {'kind': t.kind, 'dtype': t.dtype,
                           'shape': None if t.shape is None else list(t.shape)}
                  for r, t in program.types.items()},
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
def _tuple(value):
    """JSON lists become tuples; anything else is left for validation to refuse."""
    return tuple(value) if isinstance(value, list) else value


class _Decoder:
    """Turns the JSON of a Program file back into a Program.  Values are
    kept as decoded (no int() or tuple() of arbitrary JSON) so that
    validate_program sees, and refuses, what the file really holds."""

    def __init__(self, archive, path):
        self.archive = archive
        self.path = path

    def program(self, d):
        return Program(
            name=d['name'], num_registers=d['num_registers'],
            register_names={int(k): v for k, v in d['register_names'].items()},
            inputs=[self.info(v) for v in d['inputs']],
            outputs=[self.info(v) for v in d['outputs']],
            constants={int(r): self.array(v, 'the constant in register %s' % r)
                       for r, v in d['constants'].items()},
            instructions=[self.instruction(index, i)
                          for index, i in enumerate(d['instructions'])],
            # Files written before register types were stored have none: unknown.
            types={int(r): RegisterType(kind=t['kind'], dtype=t['dtype'], shape=_tuple(t['shape']))
                   for r, t in d.get('types', {}).items()})

    def instruction(self, index, i):
        return Instruction(
            op=i['op'], domain=i['domain'], version=i['version'], name=i['name'],
            inputs=_tuple(i['inputs']), outputs=_tuple(i['outputs']),
            frees=_tuple(i['frees']), captures=_tuple(i['captures']),
            attrs={k: self.value(v, 'attribute %s of instruction %d' % (k, index))
                   for k, v in i['attrs'].items()})

    @staticmethod
    def info(d):
        return ValueInfo(name=d['name'], register=d['register'], kind=d['kind'],
                         dtype=d['dtype'], shape=_tuple(d['shape']))

    def value(self, entry, what):
        if 'program' in entry:
            return self.program(entry['program'])
        if 'array' in entry or 'strings' in entry:
            return self.array(entry, what)
        if 'dtype' in entry:
            return numpy.dtype(entry['dtype'])
        if 'bytes' in entry:
            return base64.b64decode(entry['bytes'])
        if 'list' in entry:
            return [self.value(v, what) for v in entry['list']]
        return entry['value']

    def array(self, entry, what):
        """The array ``entry`` describes; ``what`` names it in errors."""
        shape = tuple(entry['shape'])
        if 'strings' in entry:
            return numpy.array(entry['strings'], dtype=object).reshape(shape)
        try:
            dtype = numpy.dtype(entry['dtype'])
        except TypeError:
            raise ProgramFormatError(
                '%s: %s has dtype %s, which NumPy alone cannot represent'
                % (self.path, what, entry['dtype'])) from None
        if not entry.get('raw'):
            return self.stored(entry['array'], dtype, shape, what)
        data = self.stored(entry['array'], numpy.dtype(numpy.uint8),
                           (dtype.itemsize * math.prod(shape),), what)
        return data.view(dtype).reshape(shape)

    def stored(self, key, dtype, shape, what):
        """Archive entry ``key``, refused unless its .npy header gives
        ``dtype`` and ``shape``; checked before any of its data is read."""
        if key not in self.archive.files:
            raise ProgramFormatError('%s: %s is missing (no %s entry)' % (self.path, what, key))
        stored_shape, stored_dtype = _npy_header(self.archive, self.path, key, what)
        if stored_dtype.name != dtype.name or stored_shape != shape:
            raise ProgramFormatError('%s: %s is stored as %s%s, but the header declares %s%s' % (
                self.path, what, stored_dtype.name, list(stored_shape), dtype.name,
                list(shape)))
        return self.archive[key]



def _npy_header(archive, path, key, what):
    """(shape, dtype) of archive entry ``key`` from its .npy header, refused
    unless its data fits in the entry's declared size: numpy allocates the
    whole array before it reads any of it."""
    info = archive.zip.getinfo(key + '.npy')
    with archive.zip.open(info) as f:
        version = numpy.lib.format.read_magic(f)
        if version not in _NPY_HEADER_READERS:
            raise ProgramFormatError('%s: %s has .npy format version %d.%d'
                                     % (path, what, *version))
        shape, _, dtype = _NPY_HEADER_READERS[version](f)
        nbytes = math.prod(shape) * dtype.itemsize
        if f.tell() + nbytes > info.file_size:
            raise ProgramFormatError('%s: %s is stored as %s%s, %d bytes, in an entry of %d'
                                     % (path, what, dtype.name, list(shape), nbytes,
                                        info.file_size))
    return shape, dtype
