"""Cost models for the model-guided tuner, numpy only.

Features of a config are the concatenation of per-knob feature rows (log2 of split
factors and a ragged-split flag, loop positions for reorders, one-hot annotations, values
of numeric knobs), looked up from tables so a batch of configs is featurized with a few
numpy gathers. The target is log(GFLOP/s) (or -log seconds), so the model ranks configs.

- `GBTModel`: gradient-boosted regression trees of small depth, fitted on residuals with
  squared loss. Trees are complete binary trees stored as arrays (feature, threshold per
  internal node, value per leaf), so prediction is `depth` vectorized steps per tree.
- `RidgeModel`: ridge regression on standardized features (fast, linear; weaker).
"""
from __future__ import annotations

from typing import List

import numpy as np


class FeatureTable:
    """Per-knob feature tables of a space; `__call__(points)` featurizes an (n, k) array."""

    def __init__(self, space):
        self.tables: List[np.ndarray] = []
        for knob in space.knobs.values():
            rows = [knob.features(i) for i in range(len(knob))]
            width = max(len(r) for r in rows)
            t = np.zeros((len(rows), width))
            for i, r in enumerate(rows):
                t[i, :len(r)] = r
            self.tables.append(t)
        self.width = sum(t.shape[1] for t in self.tables)

    def __call__(self, points) -> np.ndarray:
        P = np.asarray(points, dtype=np.int64).reshape(-1, len(self.tables))
        if not self.tables:
            return np.zeros((len(P), 1))
        return np.hstack([t[P[:, k]] for k, t in enumerate(self.tables)])


class _Tree:
    __slots__ = ("feat", "thr", "leaf", "depth")

    def __init__(self, depth):
        n_int = (1 << depth) - 1
        self.depth = depth
        self.feat = np.zeros(n_int, dtype=np.int64)
        self.thr = np.full(n_int, np.inf)      # inf: everything goes left
        self.leaf = np.zeros(1 << depth)

    def predict(self, X):
        node = np.zeros(len(X), dtype=np.int64)
        rows = np.arange(len(X))
        for _ in range(self.depth):
            go_right = X[rows, self.feat[node]] > self.thr[node]
            node = 2 * node + 1 + go_right
        return self.leaf[node - ((1 << self.depth) - 1)]


def _best_split(X, r, min_leaf):
    """(feature, threshold, gain) of the best squared-error split of residuals r, or None."""
    n, d = X.shape
    if n < 2 * min_leaf:
        return None
    order = np.argsort(X, axis=0, kind="stable")
    xs = np.take_along_axis(X, order, axis=0)
    rs = r[order]
    cs = np.cumsum(rs, axis=0)[:-1]                 # left sums for splits after row k
    total = r.sum()
    nl = np.arange(1, n)[:, None].astype(float)
    gain = cs ** 2 / nl + (total - cs) ** 2 / (n - nl) - total ** 2 / n
    valid = (xs[1:] > xs[:-1]) & (nl >= min_leaf) & (n - nl >= min_leaf)
    gain = np.where(valid, gain, -np.inf)
    k, j = np.unravel_index(int(np.argmax(gain)), gain.shape)
    if not np.isfinite(gain[k, j]) or gain[k, j] <= 1e-12:
        return None
    return j, 0.5 * (xs[k, j] + xs[k + 1, j]), gain[k, j]


class GBTModel:
    """Gradient-boosted regression trees (squared loss)."""

    def __init__(self, n_trees=60, depth=3, learning_rate=0.2, min_leaf=2, subsample=0.9, seed=0):
        self.n_trees, self.depth, self.lr = n_trees, depth, learning_rate
        self.min_leaf, self.subsample = min_leaf, subsample
        self.rng = np.random.default_rng(seed)
        self.trees: List[_Tree] = []
        self.base = 0.0

    def _fit_tree(self, X, r):
        t = _Tree(self.depth)
        # nodes in breadth-first order; a node that does not split sends everything left
        idx_of = {0: np.arange(len(X))}
        n_int = (1 << self.depth) - 1
        for node in range(n_int):
            idx = idx_of.pop(node, None)
            if idx is None:
                continue
            sp = _best_split(X[idx], r[idx], self.min_leaf) if len(idx) else None
            if sp is None:
                left, right = idx, idx[:0]
            else:
                j, thr, _ = sp
                t.feat[node], t.thr[node] = j, thr
                m = X[idx, j] > thr
                left, right = idx[~m], idx[m]
            for child, sub in ((2 * node + 1, left), (2 * node + 2, right)):
                if child < n_int:
                    idx_of[child] = sub
                else:
                    t.leaf[child - n_int] = r[sub].mean() if len(sub) else 0.0
        return t

    def fit(self, X, y):
        X = np.asarray(X, float)
        y = np.asarray(y, float)
        self.base = float(y.mean())
        pred = np.full(len(y), self.base)
        self.trees = []
        for _ in range(self.n_trees):
            if self.subsample < 1.0 and len(y) >= 16:
                rows = self.rng.random(len(y)) < self.subsample
            else:
                rows = np.ones(len(y), bool)
            t = self._fit_tree(X[rows], (y - pred)[rows])
            t.leaf *= self.lr
            pred += t.predict(X)
            self.trees.append(t)
        return self

    def predict(self, X):
        X = np.asarray(X, float)
        out = np.full(len(X), self.base)
        for t in self.trees:
            out += t.predict(X)
        return out


class RidgeModel:
    """Ridge regression with standardized features and squared-feature terms."""

    def __init__(self, alpha=1.0):
        self.alpha = alpha

    def _expand(self, X):
        return np.hstack([X, X ** 2])

    def fit(self, X, y):
        X = self._expand(np.asarray(X, float))
        self.mu = X.mean(0)
        self.sd = X.std(0) + 1e-9
        Z = (X - self.mu) / self.sd
        self.ybar = float(np.mean(y))
        A = Z.T @ Z + self.alpha * np.eye(Z.shape[1])
        self.w = np.linalg.solve(A, Z.T @ (np.asarray(y, float) - self.ybar))
        return self

    def predict(self, X):
        Z = (self._expand(np.asarray(X, float)) - self.mu) / self.sd
        return Z @ self.w + self.ybar


MODELS = {"gbt": GBTModel, "ridge": RidgeModel}
