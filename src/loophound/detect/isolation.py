"""An IsolationForest of our own: scikit-learn 1.9's scores, bit for bit, without scikit-learn.

unusual_actor scores a few hundred windows with `IsolationForest(n_estimators, random_state,
contamination="auto")`; importing scikit-learn to do it costs a scan 1.0-1.3 s of CPU, more
than fitting the forest. This module does what that call does, in numpy and plain Python, so
exactly that the scores are the same floats (tests/test_isolation.py compares them with
scikit-learn's on many shapes and seeds):

- the fit: X as float32; `y = RandomState(seed).uniform(size=n)` (the trees are regression
  trees on random targets, so a node whose targets are all equal stops early); each tree's
  seeds drawn as BaseBagging and `_set_random_states` draw them; its samples
  (`sample_without_replacement`, given to the tree as weights 0/1, so the tree sees the drawn
  rows in row order); `ExtraTreeRegressor(max_features=1, splitter="random")`, built depth
  first by DepthFirstTreeBuilder with RandomSplitter's node_split: the xorshift `rand_r` of
  sklearn/utils/_random.pxd, the shared feature permutation and constant-feature
  bookkeeping, the float32 FEATURE_THRESHOLD, the threshold drawn in [min, max), the
  partition's swap order, and the MSE criterion's sums in the order the Cython adds them
  (they decide, rarely, whether a node stops: `impurity <= EPSILON`, `improvement + EPSILON
  < 0`);
- score_samples: each row's leaf depth plus `_average_path_length` of the leaf's samples,
  summed tree by tree as sklearn sums them, then `2 ** (-depths / (n_trees * c(max_samples)))`.

The trees are built in plain Python (a node's samples and feature values as lists: most
nodes hold a handful of samples, too few for numpy to pay) and every row walks every tree at
once in numpy. Pure: no I/O. About 40 ms for 100 trees on 95 rows, 0.1 s on 2,000.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce
from operator import add, mul, sub

import numpy as np

RAND_R_MAX = 0x7FFFFFFF  # sklearn/tree/_utils.pxd
MAX_INT = 0x7FFFFFFF  # np.iinfo(np.int32).max, the bound of the seeds BaseBagging draws
MAX_SAMPLES = 256  # max_samples="auto": min(256, n)
EPSILON = float(np.finfo(np.float64).eps)  # sklearn/tree/_tree.pyx
FEATURE_THRESHOLD = np.float32(1e-7)  # sklearn/tree/_partitioner.pxd, a float32
TREE_LEAF = -1
_U32 = 0xFFFFFFFF


@dataclass
class Tree:
    """One fitted tree, its nodes in sklearn's order (depth first, left before right)."""

    left: list[int]
    right: list[int]
    feature: list[int]
    threshold: list[float]
    n_node_samples: list[int]
    depth: list[int]  # Tree.compute_node_depths: the root 1

    def add(self, n_node_samples: int, depth: int) -> None:
        """A node, a leaf until given a split."""
        self.left.append(TREE_LEAF)
        self.right.append(TREE_LEAF)
        self.feature.append(-2)
        self.threshold.append(-2.0)
        self.n_node_samples.append(n_node_samples)
        self.depth.append(depth + 1)


def anomaly_scores(X: np.ndarray, n_estimators: int = 100, random_state: int = 0) -> np.ndarray:
    """`-IsolationForest(n_estimators=n_estimators, random_state=random_state,
    contamination="auto").fit(X).score_samples(X)` of a float matrix X without NaN: 0.5
    ordinary, towards 1 isolated at once."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"expected a non-empty 2-d matrix, got shape {X.shape}")
    if n_estimators < 1:
        raise ValueError(f"n_estimators must be at least 1, got {n_estimators}")
    with np.errstate(over="ignore"):  # beyond float32's range: ±inf, as scikit-learn casts
        X32 = np.asarray(X, dtype=np.float32)
    if np.isnan(X32).any():  # scikit-learn's trees route NaN as missing: not done here
        raise ValueError("X has NaN: fill missing values before scoring")
    trees, max_samples = fit(X32, n_estimators, random_state)
    return score(X32, trees, max_samples)


def fit(X32: np.ndarray, n_estimators: int, random_state: int) -> tuple[list[Tree], int]:
    """The forest's trees, and max_samples."""
    n, n_features = X32.shape
    y = np.random.RandomState(random_state).uniform(size=n).tolist()
    max_samples = min(MAX_SAMPLES, n)
    max_depth = int(np.ceil(np.log2(max(max_samples, 2))))
    seeds = np.random.RandomState(random_state).randint(MAX_INT, size=n_estimators)
    cols = [X32[:, f].astype(np.float64).tolist() for f in range(n_features)]
    rs = np.random.RandomState()
    trees = []
    for seed in seeds.tolist():
        rs.seed(seed)  # the bagging's draws
        rows = _drawn_rows(n, max_samples, rs)
        rs.seed(seed)  # _set_random_states: the tree's random_state
        tree_seed = int(rs.randint(MAX_INT))
        rs.seed(tree_seed)  # the splitter's rand_r state
        rand_state = int(rs.randint(0, RAND_R_MAX))
        trees.append(_TreeBuilder(cols, y, rows, max_depth, rand_state).build())
    return trees, max_samples


def _drawn_rows(n: int, k: int, rs: np.random.RandomState) -> list[int]:
    """The rows a tree is fitted on, ascending (the tree gets them as weights 0/1): the set
    `sample_without_replacement(n, k, random_state=rs)` draws, after the draw of the features
    (all of them, which takes nothing from rs)."""
    ratio = k / n
    if 0.01 < ratio < 0.99:
        return sorted(rs.permutation(n)[:k].tolist())
    if ratio < 0.2:  # tracking selection
        selected: set[int] = set()
        for _ in range(k):
            j = rs.randint(n)
            while j in selected:
                j = rs.randint(n)
            selected.add(int(j))
        return sorted(selected)
    out = list(range(k))  # reservoir sampling
    for i in range(k, n):
        j = rs.randint(0, i + 1)
        if j < k:
            out[j] = i
    return sorted(out)


def _rand_r(s: int) -> tuple[int, int]:
    """sklearn's our_rand_r: (the next state, the value drawn)."""
    if s == 0:
        s = 1
    s ^= (s << 13) & _U32
    s ^= s >> 17
    s ^= (s << 5) & _U32
    return s, s & RAND_R_MAX


def _f32_plus_threshold(v: float) -> float:
    """`min_feature_value + FEATURE_THRESHOLD`, added in float32 as the Cython does."""
    return float(np.float32(v) + FEATURE_THRESHOLD)


class _TreeBuilder:
    """DepthFirstTreeBuilder with RandomSplitter and the MSE criterion, statement by
    statement: sample order, sums and stop decisions as the Cython has them."""

    def __init__(self, cols: list[list[float]], y: list[float], rows: list[int],
                 max_depth: int, rand_state: int) -> None:
        self.cols, self.y, self.max_depth, self.rand = cols, y, max_depth, rand_state
        self.samples = list(rows)
        self.weighted_n_samples = float(len(rows))  # the weights: 1.0 drawn, 0.0 not
        self.n_features = len(cols)
        self.features = list(range(self.n_features))
        self.constant_features = [0] * self.n_features

    def build(self) -> Tree:
        t = Tree([], [], [], [], [], [])
        stack = [(0, len(self.samples), 0, -1, False, math.inf, 0)]
        first = True
        while stack:
            start, end, depth, parent, is_left, impurity, n_constant = stack.pop()
            n_node = end - start
            is_leaf = depth >= self.max_depth or n_node < 2
            if first or not is_leaf:
                self._criterion_init(start, end)
            if first:
                impurity = self.sq_sum_total / self.w_node
                impurity -= (self.sum_total / self.w_node) ** 2.0
                first = False
            is_leaf = is_leaf or impurity <= EPSILON
            split = None
            if not is_leaf:
                split, n_constant = self._node_split(start, end, impurity, n_constant)
                is_leaf = split is None or split[5] + EPSILON < 0.0
            node_id = len(t.left)
            if parent != -1:
                (t.left if is_left else t.right)[parent] = node_id
            t.add(n_node, depth)
            if is_leaf:
                continue
            pos, feature, threshold, imp_left, imp_right, _ = split
            t.feature[node_id], t.threshold[node_id] = feature, threshold
            stack.append((pos, end, depth + 1, node_id, False, imp_right, n_constant))
            stack.append((start, pos, depth + 1, node_id, True, imp_left, n_constant))
        return t

    def _criterion_init(self, start: int, end: int) -> None:
        """criterion.init: the node's sums, added in sample order (every weight is 1.0)."""
        ys = [self.y[i] for i in self.samples[start:end]]
        self.start, self.end = start, end
        self.sum_total = reduce(add, ys, 0.0)
        self.sq_sum_total = reduce(add, map(mul, ys, ys), 0.0)
        self.w_node = float(end - start)

    def _next(self) -> int:
        self.rand, v = _rand_r(self.rand)
        return v

    def _node_split(self, start: int, end: int, impurity: float,
                    n_known: int) -> tuple[tuple | None, int]:
        features, cols, samples = self.features, self.cols, self.samples
        f_i = self.n_features
        n_found = n_drawn = n_visited = 0
        n_total = n_known
        best = None
        while f_i > n_total and (n_visited < 1 or n_visited <= n_found + n_drawn):
            n_visited += 1
            f_j = n_drawn + self._next() % (f_i - n_found - n_drawn)
            if f_j < n_known:
                features[n_drawn], features[f_j] = features[f_j], features[n_drawn]
                n_drawn += 1
                continue
            f_j += n_found
            feature = features[f_j]
            col = cols[feature]
            values = [col[i] for i in samples[start:end]]
            lo, hi = min(values), max(values)  # the first of equals, as find_min_max
            if hi <= _f32_plus_threshold(lo):
                features[f_j], features[n_total] = features[n_total], feature
                n_found += 1
                n_total += 1
                continue
            f_i -= 1
            features[f_i], features[f_j] = features[f_j], features[f_i]
            threshold = (hi - lo) * float(self._next()) / float(RAND_R_MAX) + lo
            if threshold == hi:
                threshold = lo
            pos = self._partition(start, end, values, threshold)
            if pos - start < 1 or end - pos < 1:
                continue
            # proxy_impurity_improvement is finite, so always above -inf: the split is kept
            best = (pos, feature, threshold)
        n_const = n_total
        features[:n_known] = self.constant_features[:n_known]
        self.constant_features[n_known:n_known + n_found] = features[n_known:n_known + n_found]
        if best is None:
            return None, n_const
        pos, feature, threshold = best
        imp_left, imp_right, improvement = self._children(pos, impurity)
        return (pos, feature, threshold, imp_left, imp_right, improvement), n_const

    def _partition(self, start: int, end: int, values: list[float], threshold: float) -> int:
        """partition_samples: a pointer from each end, a sample going right swapped with the
        last unexamined one, which is examined next. Samples going left end up in the order
        they were examined, those going right from the end backwards."""
        k = end - start
        seg = self.samples[start:end]
        left: list[int] = []
        right: list[int] = []
        cur = 0
        for _ in range(k):
            if values[cur] <= threshold:
                left.append(seg[cur])
                cur = len(left)
            else:
                right.append(seg[cur])
                cur = k - len(right)
        right.reverse()
        self.samples[start:end] = left + right
        return start + len(left)

    def _children(self, pos: int, impurity: float) -> tuple[float, float, float]:
        """criterion.reset(); update(pos); children_impurity; impurity_improvement."""
        start, end, w_node = self.start, self.end, self.w_node
        ys = [self.y[i] for i in self.samples[start:end]]  # in the partitioned order
        ys_left = ys[:pos - start]
        if pos - start <= end - pos:
            sum_left = reduce(add, ys_left, 0.0)
        else:  # from the end, subtracting
            sum_left = reduce(sub, reversed(ys[pos - start:]), self.sum_total)
        w_left = float(pos - start)
        w_right = w_node - w_left
        sum_right = self.sum_total - sum_left
        sq_left = reduce(add, map(mul, ys_left, ys_left), 0.0)
        sq_right = self.sq_sum_total - sq_left
        imp_left = sq_left / w_left
        imp_right = sq_right / w_right
        imp_left -= (sum_left / w_left) ** 2.0
        imp_right -= (sum_right / w_right) ** 2.0
        improvement = ((w_node / self.weighted_n_samples)
                       * (impurity - (w_right / w_node * imp_right)
                          - (w_left / w_node * imp_left)))
        return imp_left, imp_right, improvement


def score(X32: np.ndarray, trees: list[Tree], max_samples: int) -> np.ndarray:
    """IsolationForest._compute_score_samples: the same float operations in the same order.
    The trees' nodes side by side, so every row walks every tree at once."""
    n = X32.shape[0]
    sizes = [len(t.left) for t in trees]
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.intp)
    base = np.repeat(offsets, sizes)
    left = np.concatenate([t.left for t in trees]).astype(np.intp)
    right = np.concatenate([t.right for t in trees]).astype(np.intp)
    inner = left != TREE_LEAF
    left[inner] += base[inner]
    right[inner] += base[inner]
    feature = np.concatenate([t.feature for t in trees]).astype(np.intp)
    threshold = np.concatenate([t.threshold for t in trees]).astype(np.float64)
    depth = np.concatenate([t.depth for t in trees]).astype(np.int64)
    table = average_path_length(np.arange(max_samples + 1))
    apl = table[np.concatenate([t.n_node_samples for t in trees])]
    # a leaf leads to itself: every row takes as many steps as the deepest tree has levels
    leaf = ~inner
    left[leaf] = right[leaf] = np.flatnonzero(leaf)
    feature[leaf] = 0
    values = X32.T.astype(np.float64).ravel()  # float32 <= float64, as the Cython compares
    cell = feature * n  # where a node's feature starts in `values`
    node = np.repeat(offsets, n).reshape(len(trees), n)
    row = np.arange(n)
    for _ in range(int(depth.max()) - 1):
        go_left = values[cell[node] + row] <= threshold[node]
        node = np.where(go_left, left[node], right[node])
    # per tree: decision path length (an int64, the root 1) + c(leaf samples) - 1.0
    per_tree = depth[node] + apl[node] - 1.0
    depths = np.zeros(n, order="f")
    for contribution in per_tree:  # tree after tree, as the forest adds them
        depths += contribution
    denominator = len(trees) * average_path_length(np.array([max_samples]))
    return 2 ** (-np.divide(depths, denominator, out=np.ones_like(depths),
                            where=denominator != 0))


def average_path_length(n_samples_leaf: np.ndarray) -> np.ndarray:
    """sklearn.ensemble._iforest._average_path_length, operation for operation."""
    n_samples_leaf = np.asarray(n_samples_leaf)
    shape = n_samples_leaf.shape
    n_samples_leaf = n_samples_leaf.reshape((1, -1))
    average = np.zeros(n_samples_leaf.shape)
    mask_1 = n_samples_leaf <= 1
    mask_2 = n_samples_leaf == 2
    not_mask = ~np.logical_or(mask_1, mask_2)
    average[mask_1] = 0.0
    average[mask_2] = 1.0
    average[not_mask] = (
        2.0 * (np.log(n_samples_leaf[not_mask] - 1.0) + np.euler_gamma)
        - 2.0 * (n_samples_leaf[not_mask] - 1.0) / n_samples_leaf[not_mask]
    )
    return average.reshape(shape)
