"""Text kernels on string tensors (numpy object arrays of ``str``):
StringNormalizer, StringConcat, StringSplit, RegexFullMatch and
TfIdfVectorizer (which also accepts integer token tensors).

String tensors live on the host, so these kernels use numpy directly.
"""
import re

import numpy

from .registry import LATEST, kernel


def _strings(x):
    return numpy.asarray(x, dtype=object)


@kernel('StringNormalizer', versions=(10, LATEST))
def string_normalizer(xp, X, *, case_change_action='NONE', is_case_sensitive=0, locale=None,
                      stopwords=None):
    # ``locale`` is accepted for compatibility; case mapping is Unicode's default.
    X = _strings(X)
    if X.ndim == 2 and X.shape[0] != 1 or X.ndim > 2:
        raise ValueError('StringNormalizer accepts [C] or [1, C] tensors, got shape %s'
                         % (X.shape,))
    words = list(X.reshape(-1))
    if stopwords:
        if is_case_sensitive:
            stop = set(stopwords)
            words = [w for w in words if w not in stop]
        else:
            stop = {s.lower() for s in stopwords}
            words = [w for w in words if w.lower() not in stop]
    if case_change_action == 'LOWER':
        words = [w.lower() for w in words]
    elif case_change_action == 'UPPER':
        words = [w.upper() for w in words]
    elif case_change_action != 'NONE':
        raise ValueError('unknown case_change_action %r' % case_change_action)
    if not words:
        words = ['']  # an all-stopword input gives one empty string
    y = numpy.empty(len(words), dtype=object)
    y[:] = words
    return y.reshape((1, -1)) if X.ndim == 2 else y


@kernel('StringConcat', versions=(20, LATEST))
def string_concat(xp, X, Y):
    # Object arrays add elementwise with str.__add__, broadcasting included.
    return numpy.asarray(_strings(X) + _strings(Y), dtype=object)


@kernel('StringSplit', versions=(20, LATEST))
def string_split(xp, X, *, delimiter=None, maxsplit=None):
    X = _strings(X)
    sep = delimiter or None  # None: split on runs of whitespace
    limit = -1 if maxsplit is None else maxsplit
    parts = [s.split(sep, limit) for s in X.reshape(-1)]
    counts = numpy.array([len(p) for p in parts], dtype=numpy.int64).reshape(X.shape)
    width = int(counts.max()) if counts.size else 0
    y = numpy.full((len(parts), width), '', dtype=object)
    for i, p in enumerate(parts):
        y[i, :len(p)] = p
    return y.reshape(X.shape + (width,)), counts


@kernel('RegexFullMatch', versions=(20, LATEST))
def regex_full_match(xp, X, *, pattern):
    X = _strings(X)
    regex = re.compile(pattern)
    matches = [regex.fullmatch(s) is not None for s in X.reshape(-1)]
    return numpy.array(matches, dtype=bool).reshape(X.shape)


def _token_ids(xp, X, pool):
    """Map tokens to indices into the sorted vocabulary of ``pool``; tokens
    absent from the pool get -1."""
    if X.dtype == object:
        vocab = {t: i for i, t in enumerate(sorted(set(pool)))}
        ids = numpy.array([vocab.get(t, -1) for t in X.reshape(-1)], dtype=numpy.int64)
        return xp.asarray(ids.reshape(X.shape)), len(vocab)
    X = xp.asarray(X)
    vocab = xp.unique(xp.asarray(pool, dtype=numpy.int64))
    pos = xp.clip(xp.searchsorted(vocab, X), 0, vocab.shape[0] - 1)
    return xp.where(vocab[pos] == X, pos, -1), int(vocab.shape[0])


@kernel('TfIdfVectorizer', versions=(9, LATEST))
def tfidf_vectorizer(xp, X, *, max_gram_length, max_skip_count, min_gram_length, mode,
                     ngram_counts, ngram_indexes, pool_int64s=None, pool_strings=None,
                     weights=None):
    if mode not in ('TF', 'IDF', 'TFIDF'):
        raise ValueError('unknown TfIdfVectorizer mode %r' % mode)
    pool = pool_strings if pool_strings is not None else pool_int64s
    if pool is None:
        raise ValueError('TfIdfVectorizer needs pool_strings or pool_int64s')
    rows = X.reshape(1, -1) if X.ndim == 1 else X
    n_rows, length = rows.shape
    ids, vocab_size = _token_ids(xp, rows, pool)
    pool_ids, _ = _token_ids(xp, numpy.asarray(pool, dtype=rows.dtype), pool)
    # An n-gram becomes one integer: its token ids + 1 as digits in base
    # vocab_size + 1, so grams with an unknown token (digit 0) match nothing.
    base = vocab_size + 1
    if base ** max_gram_length >= 2 ** 63:
        raise ValueError('TfIdfVectorizer: vocabulary too large for %d-grams' % max_gram_length)
    n_pool = len(ngram_indexes)
    counts = xp.zeros((n_rows, n_pool), dtype=numpy.float64)
    starts = list(ngram_counts) + [len(pool)]
    first_gram = 0  # index of the first gram of the current size among all grams
    for n in range(1, len(ngram_counts) + 1):
        n_grams = (starts[n] - starts[n - 1]) // n
        if min_gram_length <= n <= max_gram_length and n_grams:
            grams = pool_ids[starts[n - 1]:starts[n]].reshape(n_grams, n) + 1
            keys = (grams * base ** xp.arange(n)).sum(axis=1)
            order = xp.argsort(keys)
            sorted_keys = keys[order]
            for skip in range(max_skip_count + 1 if n > 1 else 1):
                span = (n - 1) * (skip + 1)
                if span >= length:
                    break
                starts_at = xp.arange(length - span)
                cols = starts_at[:, None] + (skip + 1) * xp.arange(n)[None, :]
                found = ((ids[:, cols] + 1) * base ** xp.arange(n)).sum(axis=2)
                pos = xp.clip(xp.searchsorted(sorted_keys, found), 0, n_grams - 1)
                hit = sorted_keys[pos] == found
                gram = first_gram + order[pos]
                flat = (xp.arange(n_rows)[:, None] * n_pool + gram)[hit]
                counts += xp.bincount(flat, minlength=n_rows * n_pool).reshape(n_rows, n_pool)
        first_gram += n_grams
    if mode == 'IDF':
        counts = xp.minimum(counts, 1)
    if mode != 'TF' and weights is not None:
        counts = counts * xp.asarray(weights, dtype=numpy.float64)
    out = xp.zeros((n_rows, max(ngram_indexes) + 1), dtype=numpy.float32)
    out[:, xp.asarray(ngram_indexes)] = counts.astype(numpy.float32)
    return out[0] if X.ndim == 1 else out
