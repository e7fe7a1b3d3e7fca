"""Reading C source as a C99 compiler does, to check what of it is code:
trigraphs replaced and backslash-newlines spliced first (translation
phases 1 and 2; gcc -std=c99 reads trigraphs), then comments and string and
character literals recognised (phase 3)."""
import re

_TRIGRAPHS = dict(zip('=(/)\'<!>-', '#[\\]^{|}~'))
_TOKENS = re.compile(r'''//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|[^"'/]+|/''',
                     re.S)
_ESCAPES = {'n': 10, 't': 9, 'r': 13, 'a': 7, 'b': 8, 'f': 12, 'v': 11, '\\': 92, '"': 34,
            "'": 39, '?': 63}


def split_c(text):
    """(code, literals) of the C source ``text``: ``code`` is the text as
    the compiler reads it with each string literal replaced by ``""``
    (comments kept), ``literals`` the bytes of every string literal in
    order.  Raises AssertionError on an unterminated comment or literal."""
    text = re.sub(r'\?\?([=(/)\'<!>-])', lambda m: _TRIGRAPHS[m.group(1)], text)
    text = text.replace('\\\n', '')
    code, literals, at = [], [], 0
    for token in _TOKENS.finditer(text):
        assert token.start() == at, 'unterminated comment or literal at %r' % text[at:at + 40]
        at = token.end()
        if token.group().startswith('"'):
            literals.append(_decode(token.group()[1:-1]))
            code.append('""')
        else:
            code.append(token.group())
    assert at == len(text), 'unterminated comment or literal at %r' % text[at:at + 40]
    return ''.join(code), literals


def _decode(body):
    """The bytes of a string literal's ``body`` (between the quotes)."""
    out = bytearray()
    for m in re.finditer(r'\\([0-7]{1,3}|x[0-9a-fA-F]+|.)|[^\\]', body, re.S):
        escape = m.group(1)
        if escape is None:
            out += m.group().encode('utf-8')
        elif escape[0] in '01234567':
            out.append(int(escape, 8))
        elif escape[0] == 'x':
            out.append(int(escape[1:], 16))
        else:
            out.append(_ESCAPES[escape])
    return bytes(out)
