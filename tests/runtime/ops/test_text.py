"""Tests of the text kernels."""
import numpy as np
import pytest

from chainer_compiler.runtime.ops.text import (
    regex_full_match,
    string_concat,
    string_normalizer,
    string_split,
    tfidf_vectorizer,
)


def S(*values, shape=None):
    a = np.empty(len(values), dtype=object)
    a[:] = values
    return a.reshape(shape if shape is not None else (len(values),))


def test_string_normalizer_case_insensitive_stopwords_and_lower():
    y = string_normalizer(np, S('The', 'Cat', 'the', shape=(1, 3)), stopwords=['THE'],
                          case_change_action='LOWER')
    assert y.shape == (1, 1) and y.dtype == object
    assert y[0, 0] == 'cat'


def test_string_normalizer_case_sensitive_keeps_other_case():
    y = string_normalizer(np, S('The', 'the'), stopwords=['the'], is_case_sensitive=1)
    assert list(y) == ['The']


def test_string_normalizer_all_removed_gives_one_empty_string():
    y = string_normalizer(np, S('a', 'a'), stopwords=['a'])
    assert y.shape == (1,) and y[0] == ''


def test_string_normalizer_rejects_bad_shape():
    with pytest.raises(ValueError):
        string_normalizer(np, S('a', 'b', shape=(2, 1)))


def test_string_concat_broadcasts():
    y = string_concat(np, S('a', 'b', shape=(2, 1)), S('x', 'y', 'z'))
    assert y.shape == (2, 3) and y.dtype == object
    assert y[1, 2] == 'bz'


def test_string_split_pads_and_counts():
    y, z = string_split(np, S('a,b,c', '', 'd', shape=(3,)), delimiter=',')
    assert y.shape == (3, 3) and z.dtype == np.int64
    assert list(z) == [3, 1, 1]
    assert list(y[0]) == ['a', 'b', 'c'] and list(y[1]) == ['', '', '']


def test_string_split_whitespace_with_maxsplit():
    y, z = string_split(np, S('  a  b c ', shape=(1, 1)), maxsplit=1)
    assert y.shape == (1, 1, 2)
    assert list(y[0, 0]) == ['a', 'b c '] and z[0, 0] == 2


def test_regex_full_match_requires_whole_string():
    y = regex_full_match(np, S('abc', 'abcd', shape=(1, 2)), pattern='a.c')
    assert y.dtype == bool
    np.testing.assert_array_equal(y, [[True, False]])


POOL = dict(ngram_counts=[0, 3], ngram_indexes=[2, 0, 1, 4, 3],
            pool_int64s=[1, 2, 3, 1, 2, 2, 3])


def test_tfidf_int_unigrams_and_bigrams_with_skip():
    x = np.array([1, 2, 9, 3, 2], np.int64)
    y = tfidf_vectorizer(np, x, max_gram_length=2, max_skip_count=1, min_gram_length=1,
                         mode='TF', **POOL)
    assert y.dtype == np.float32 and y.shape == (5,)
    # unigrams 1, 2, 3 -> slots 2, 0, 1; bigram (1,2): 1 (skip 0);
    # bigram (2,3): (2,_,3) skip 1 -> 1.
    np.testing.assert_array_equal(y, [2, 1, 1, 1, 1])


def test_tfidf_batch_idf_weights_and_min_gram_length():
    x = np.array([[1, 2, 1, 2], [3, 3, 3, 3]], np.int32)
    y = tfidf_vectorizer(np, x, max_gram_length=2, max_skip_count=0, min_gram_length=2,
                         mode='IDF', weights=[1, 1, 1, 0.5, 3], **POOL)
    assert y.shape == (2, 5)
    np.testing.assert_array_equal(y, [[0, 0, 0, 0, 0.5], [0, 0, 0, 0, 0]])


def test_tfidf_strings_tfidf_mode():
    x = S('a', 'b', 'a', 'zz')
    y = tfidf_vectorizer(np, x, max_gram_length=1, max_skip_count=0, min_gram_length=1,
                         mode='TFIDF', ngram_counts=[0], ngram_indexes=[0, 1],
                         pool_strings=['a', 'zz'], weights=[2.0, 0.5])
    np.testing.assert_array_equal(y, [4.0, 0.5])


def test_tfidf_rejects_unknown_mode():
    with pytest.raises(ValueError):
        tfidf_vectorizer(np, np.array([1]), max_gram_length=1, max_skip_count=0,
                         min_gram_length=1, mode='BM25', **POOL)
