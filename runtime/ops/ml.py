"""Kernels of the 'ai.onnx.ml' domain: LabelEncoder, ArrayFeatureExtractor,
Binarizer and TreeEnsemble."""
import math

import numpy

from .registry import LATEST, always, kernel

ML = 'ai.onnx.ml'


def _lookup(xp, x, keys, values, default):
    """Map each element of ``x`` through keys -> values (the last duplicate
    key wins; a NaN key matches every NaN); unmatched elements get ``default``."""
    if x.dtype == object or keys.dtype == object:
        table = dict(zip(keys.tolist(), values.tolist()))
        flat = [table.get(k, default) for k in numpy.asarray(x).reshape(-1).tolist()]
        out = numpy.empty(len(flat), dtype=values.dtype)
        out[:] = flat
        return out.reshape(x.shape)
    keys = keys.astype(x.dtype)
    is_nan = keys != keys
    table = dict(zip(keys[~is_nan].tolist(), values[~is_nan].tolist()))
    sorted_keys = numpy.array(sorted(table), dtype=x.dtype)
    sorted_values = numpy.array([table[k] for k in sorted(table)], dtype=values.dtype)
    if sorted_keys.size:
        pos = xp.clip(xp.searchsorted(xp.asarray(sorted_keys), x), 0, sorted_keys.size - 1)
        found = xp.asarray(sorted_keys)[pos] == x
        out = xp.where(found, xp.asarray(sorted_values)[pos], default)
    else:
        out = xp.full(x.shape, default)
    if is_nan.any():
        out = xp.where(x != x, values[is_nan][-1], out)
    return out.astype(values.dtype)


def _strings(values):
    out = numpy.empty(len(values), dtype=object)
    out[:] = values
    return out


@kernel('LabelEncoder', domain=ML, versions=(1, 1), host_only=always)
def label_encoder_1(xp, X, *, classes_strings=(), default_int64=-1, default_string='_Unused'):
    # Strings map to their position in classes_strings, integers back to strings.
    classes = _strings(list(classes_strings))
    positions = numpy.arange(len(classes), dtype=numpy.int64)
    if X.dtype == object:
        return _lookup(xp, X, classes, positions, default_int64)
    return _lookup(xp, X.astype(numpy.int64), positions, classes, default_string)


def _one_of(role, tensor, int64s, floats, strings):
    """The LabelEncoder keys or values, from whichever attribute form is set."""
    if tensor is not None:
        return numpy.asarray(tensor).reshape(-1)
    if int64s is not None:
        return numpy.array(int64s, dtype=numpy.int64)
    if floats is not None:
        return numpy.array(floats, dtype=numpy.float32)
    if strings is not None:
        return _strings(strings)
    raise ValueError('LabelEncoder needs one %s_* attribute' % role)


@kernel('LabelEncoder', domain=ML, versions=(2, LATEST))
def label_encoder(xp, X, *, keys_tensor=None, keys_int64s=None, keys_floats=None,
                  keys_strings=None, values_tensor=None, values_int64s=None,
                  values_floats=None, values_strings=None, default_tensor=None,
                  default_int64=-1, default_float=-0.0, default_string='_Unused'):
    keys = _one_of('keys', keys_tensor, keys_int64s, keys_floats, keys_strings)
    values = _one_of('values', values_tensor, values_int64s, values_floats, values_strings)
    if default_tensor is not None:
        default = numpy.asarray(default_tensor).reshape(-1)[0]
    elif values.dtype == object:
        default = default_string
    elif values.dtype.kind == 'f':
        default = default_float
    else:
        default = default_int64
    return _lookup(xp, X, keys, values, default)


@kernel('ArrayFeatureExtractor', domain=ML, versions=(1, LATEST))
def array_feature_extractor(xp, X, Y):
    return xp.take(X, Y.reshape(-1).astype(numpy.int64), axis=-1)


@kernel('Binarizer', domain=ML, versions=(1, LATEST))
def binarizer(xp, X, *, threshold=0.0):
    return (X > threshold).astype(X.dtype)


# nodes_modes values of TreeEnsemble.
_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)


def _erfinv(xp, y):
    """Inverse error function (Giles' single-precision polynomial approximation)."""
    w = -xp.log((1 - y) * (1 + y))
    central = w - 2.5
    p = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
              -0.00125372503, -0.00417768164, 0.246640727, 1.50140941):
        p = c + p * central
    tail = xp.sqrt(w) - 3
    q = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
              -0.0076224613, 0.00943887047, 1.00167406, 2.83297682):
        q = c + q * tail
    return xp.where(w < 5, p, q) * y


def _post_transform(xp, y, post_transform):
    if post_transform == 0:
        return y
    if post_transform in (1, 3):
        e = xp.exp(y - y.max(axis=1, keepdims=True))
        if post_transform == 3:
            e = xp.where(y == 0, 0, e)  # SOFTMAX_ZERO: zero scores stay zero
        total = e.sum(axis=1, keepdims=True)
        return e / xp.where(total == 0, 1, total)
    if post_transform == 2:
        return 1 / (1 + xp.exp(-y))
    if post_transform == 4:
        return math.sqrt(2) * _erfinv(xp, 2 * y - 1)
    raise ValueError('TreeEnsemble: unknown post_transform %d' % post_transform)


def _membership_sets(xp, membership_values, modes, dtype):
    """Per node, the row of a NaN-padded matrix holding its member set."""
    values = numpy.asarray(membership_values, dtype=numpy.float64).reshape(-1)
    sets, current = [], []
    for v in values.tolist():
        if v != v:
            sets.append(current)
            current = []
        else:
            current.append(v)
    if current:
        sets.append(current)
    width = max([len(s) for s in sets] + [1])
    matrix = numpy.full((max(len(sets), 1), width), numpy.nan)
    for i, s in enumerate(sets):
        matrix[i, :len(s)] = s
    rows = numpy.cumsum(modes == _MEMBER) - 1
    return xp.asarray(matrix.astype(dtype)), xp.asarray(numpy.clip(rows, 0, None))


@kernel('TreeEnsemble', domain=ML, versions=(5, LATEST))
def tree_ensemble(xp, X, *, aggregate_function=1, leaf_targetids, leaf_weights,
                  membership_values=None, n_targets, nodes_falseleafs, nodes_falsenodeids,
                  nodes_featureids, nodes_hitrates=None, nodes_missing_value_tracks_true=None,
                  nodes_modes, nodes_splits, nodes_trueleafs, nodes_truenodeids,
                  post_transform=0, tree_roots):
    X = X.reshape(X.shape[0], -1) if X.ndim != 2 else X
    n, n_trees = X.shape[0], len(tree_roots)
    modes_h = numpy.asarray(nodes_modes).astype(numpy.int64).reshape(-1)
    modes = xp.asarray(modes_h)
    features = xp.asarray(nodes_featureids, dtype=numpy.int64)
    splits = xp.asarray(numpy.asarray(nodes_splits).reshape(-1)).astype(X.dtype)
    true_ids = xp.asarray(nodes_truenodeids, dtype=numpy.int64)
    false_ids = xp.asarray(nodes_falsenodeids, dtype=numpy.int64)
    true_leaf = xp.asarray(nodes_trueleafs, dtype=bool)
    false_leaf = xp.asarray(nodes_falseleafs, dtype=bool)
    tracks = numpy.zeros(len(modes_h), dtype=bool) if nodes_missing_value_tracks_true is None \
        else numpy.asarray(nodes_missing_value_tracks_true, dtype=bool)
    tracks = xp.asarray(tracks)
    has_members = bool((modes_h == _MEMBER).any())
    if has_members:
        member_sets, member_row = _membership_sets(xp, membership_values, modes_h, X.dtype)

    # All (sample, tree) pairs descend together, one level per iteration.
    rows = xp.arange(n)[:, None]
    node = xp.broadcast_to(xp.asarray(tree_roots, dtype=numpy.int64), (n, n_trees)).copy()
    leaf = xp.zeros((n, n_trees), dtype=numpy.int64)
    done = xp.zeros((n, n_trees), dtype=bool)
    for _ in range(len(modes_h) + 1):
        x = X[rows, features[node]]
        split, mode = splits[node], modes[node]
        decision = xp.select(
            [mode == _LEQ, mode == _LT, mode == _GTE, mode == _GT, mode == _EQ, mode == _NEQ],
            [x <= split, x < split, x >= split, x > split, x == split, x != split], False)
        if has_members:
            in_set = (x[..., None] == member_sets[member_row[node]]).any(axis=-1)
            decision = xp.where(mode == _MEMBER, in_set, decision)
        decision = xp.where(xp.isnan(x), tracks[node], decision)
        target = xp.where(decision, true_ids[node], false_ids[node])
        reaches_leaf = xp.where(decision, true_leaf[node], false_leaf[node]) & ~done
        leaf = xp.where(reaches_leaf, target, leaf)
        node = xp.where(done | reaches_leaf, node, target)
        done = done | reaches_leaf
        if bool(done.all()):
            break
    else:
        raise ValueError('TreeEnsemble: a tree does not reach a leaf (cycle in nodes_*)')

    weights = xp.asarray(numpy.asarray(leaf_weights).reshape(-1)).astype(numpy.float64)[leaf]
    targets = xp.asarray(leaf_targetids, dtype=numpy.int64)[leaf]
    if aggregate_function in (0, 1):
        flat = (rows * n_targets + targets).reshape(-1)
        y = xp.bincount(flat, weights=weights.reshape(-1), minlength=n * n_targets)
        y = y.reshape(n, n_targets)
        if aggregate_function == 0:
            y = y / n_trees
    elif aggregate_function in (2, 3):
        hit = targets[..., None] == xp.arange(n_targets)
        fill = numpy.inf if aggregate_function == 2 else -numpy.inf
        spread = xp.where(hit, weights[..., None], fill)
        y = spread.min(axis=1) if aggregate_function == 2 else spread.max(axis=1)
        y = xp.where(hit.any(axis=1), y, 0.0)  # targets no tree reaches score 0
    else:
        raise ValueError('TreeEnsemble: unknown aggregate_function %d' % aggregate_function)
    return _post_transform(xp, y, post_transform).astype(X.dtype)
