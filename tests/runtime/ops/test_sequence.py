"""Tests for the sequence and optional kernels."""
import numpy as np
import pytest

from chainer_compiler.runtime.ops.sequence import (
    concat_from_sequence,
    optional,
    optional_get_element,
    optional_has_element,
    sequence_at,
    sequence_construct,
    sequence_empty,
    sequence_erase,
    sequence_insert,
    sequence_length,
    sequence_map,
    split_to_sequence,
)


def _seq(*values):
    return [np.full(2, v, np.float32) for v in values]


def _ints(seq):
    return [int(t[0]) for t in seq]


def test_empty_and_construct():
    assert sequence_empty(np, dtype=np.dtype(np.int64)) == []
    a, b = np.zeros(2), np.ones(3)
    seq = sequence_construct(np, a, b)
    assert isinstance(seq, list) and seq[0] is a and seq[1] is b


@pytest.mark.parametrize('position, expected', [
    (None, [0, 1, 2, 9]), (0, [9, 0, 1, 2]), (3, [0, 1, 2, 9]),
    (-1, [0, 1, 9, 2]), (-3, [9, 0, 1, 2])])
def test_insert_positions(position, expected):
    seq = _seq(0, 1, 2)
    pos = None if position is None else np.array(position, np.int64)
    out = sequence_insert(np, seq, np.full(2, 9, np.float32), pos)
    assert _ints(out) == expected
    assert _ints(seq) == [0, 1, 2]  # the input sequence is left alone


@pytest.mark.parametrize('position', [4, -4])
def test_insert_out_of_range(position):
    with pytest.raises(IndexError):
        sequence_insert(np, _seq(0, 1, 2), np.zeros(2, np.float32), np.array(position))


@pytest.mark.parametrize('position, expected', [
    (None, [0, 1]), (0, [1, 2]), (-2, [0, 2]), (np.array([1]), [0, 2])])
def test_erase_positions(position, expected):
    seq = _seq(0, 1, 2)
    pos = position if position is None or isinstance(position, np.ndarray) else np.array(position)
    assert _ints(sequence_erase(np, seq, pos)) == expected
    assert len(seq) == 3


def test_erase_errors():
    with pytest.raises(IndexError):
        sequence_erase(np, _seq(0, 1), np.array(2))
    with pytest.raises(IndexError):
        sequence_erase(np, [])


def test_at_and_length():
    seq = _seq(0, 1, 2)
    assert sequence_at(np, seq, np.array(-1, np.int32)) is seq[2]
    assert sequence_at(np, seq, np.array(1, np.int64)) is seq[1]
    with pytest.raises(IndexError):
        sequence_at(np, seq, np.array(-4))
    n = sequence_length(np, seq)
    assert n.shape == () and n.dtype == np.int64 and int(n) == 3
    assert int(sequence_length(np, [])) == 0


def test_concat_from_sequence():
    seq = [np.arange(6, dtype=np.int32).reshape(2, 3) + 10 * k for k in range(3)]
    assert concat_from_sequence(np, seq, axis=-1).shape == (2, 9)
    out = concat_from_sequence(np, seq, axis=0)
    np.testing.assert_array_equal(out, np.concatenate(seq))
    assert out.dtype == np.int32
    # With new_axis, axis may name the position after the last one.
    stacked = concat_from_sequence(np, seq, axis=-1, new_axis=1)
    assert stacked.shape == (2, 3, 3)
    np.testing.assert_array_equal(stacked[..., 2], seq[2])
    assert concat_from_sequence(np, seq, axis=2, new_axis=1).shape == (2, 3, 3)


def test_split_to_sequence_scalar_split_leaves_a_shorter_last_chunk():
    x = np.arange(14, dtype=np.float32).reshape(7, 2)
    parts = split_to_sequence(np, x, np.array(3, np.int64))
    assert [p.shape for p in parts] == [(3, 2), (3, 2), (1, 2)]
    np.testing.assert_array_equal(np.concatenate(parts), x)


def test_split_to_sequence_explicit_sizes_on_negative_axis():
    x = np.arange(12, dtype=np.int64).reshape(2, 6)
    parts = split_to_sequence(np, x, np.array([1, 0, 5], np.int64), axis=-1, keepdims=0)
    # keepdims is ignored when split is given.
    assert [p.shape for p in parts] == [(2, 1), (2, 0), (2, 5)]
    np.testing.assert_array_equal(parts[2], x[:, 1:])
    with pytest.raises(ValueError, match='add up'):
        split_to_sequence(np, x, np.array([2, 2]), axis=1)
    with pytest.raises(ValueError, match='positive'):
        split_to_sequence(np, x, np.array(0))


@pytest.mark.parametrize('keepdims, shape', [(1, (3, 1)), (0, (3,))])
def test_split_to_sequence_default_splits_into_ones(keepdims, shape):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    parts = split_to_sequence(np, x, axis=1, keepdims=keepdims)
    assert len(parts) == 4 and all(p.shape == shape for p in parts)
    np.testing.assert_array_equal(parts[2].reshape(3), x[:, 2])


def test_split_to_sequence_of_empty_axis_is_empty():
    assert split_to_sequence(np, np.zeros((0, 3), np.float32)) == []


def test_sequence_map_zips_sequences_and_broadcasts_tensors():
    seq = _seq(1, 2, 3)
    other = _seq(10, 20, 30)
    bias = np.full(2, 100, np.float32)
    sums, shapes = sequence_map(
        np, seq, other, bias,
        body=lambda a, b, c: [a + b + c, np.array(a.shape, np.int64)], n_outputs=2)
    assert _ints(sums) == [111, 122, 133]
    assert all(s.dtype == np.int64 and list(s) == [2] for s in shapes)


def test_sequence_map_empty_and_length_mismatch():
    assert sequence_map(np, [], body=lambda a: [a], n_outputs=1) == ([],)
    with pytest.raises(ValueError, match='lengths'):
        sequence_map(np, _seq(1, 2), _seq(1), body=lambda a, b: [a], n_outputs=1)


def test_optionals():
    x = np.ones(2, np.float32)
    seq = _seq(1)
    assert optional(np, x) is x
    assert optional(np, type=None) is None
    assert optional(np, seq) is seq
    for value, expected in [(x, True), (seq, True), ([], True), (None, False)]:
        has = optional_has_element(np, value)
        assert has.dtype == np.bool_ and has.shape == () and bool(has) is expected
    assert bool(optional_has_element(np)) is False  # input omitted (opset 18)
    assert optional_get_element(np, seq) is seq
    with pytest.raises(ValueError, match='empty optional'):
        optional_get_element(np, None)


def test_split_to_sequence_scalar_split_of_empty_axis_is_empty():
    assert split_to_sequence(np, np.zeros((2, 0), np.float32), np.array(2), axis=1) == []
