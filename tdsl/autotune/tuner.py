"""Search strategies. A tuner proposes points of a `ConfigSpace` (tuples of knob indices)
it has not proposed before and learns from the records of measured points.

- `RandomTuner`: uniform samples without replacement.
- `GridTuner`: the space in index order (first knob fastest).
- `ModelTuner`: a numpy cost model (`model.GBTModel` by default) fitted on the records so
  far; simulated annealing over the model proposes the next batch, plus a share of random
  points for exploration. Until `warmup` configs have been measured it samples at random.
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np

from .model import MODELS, FeatureTable
from .errors import AutotuneError
from .space import ConfigSpace

Point = Tuple[int, ...]


class Tuner:
    name = "base"

    def __init__(self, space: ConfigSpace, seed: int = 0):
        self.space = space
        self.dims = space.dims
        self.rng = np.random.default_rng(seed)
        self.visited: set = set()
        self.points: List[Point] = []
        self.scores: List[Optional[float]] = []     # log GFLOP/s (or -log s); None = failed

    # ---------------------------------------------------------------- bookkeeping
    def has_next(self) -> bool:
        return len(self.visited) < self.space.size

    def mark_visited(self, point: Point):
        self.visited.add(tuple(point))

    def update(self, point: Optional[Point], record):
        """Learns from one measured record (`point` None when it is outside the space)."""
        if point is None:
            return
        self.visited.add(tuple(point))
        self.points.append(tuple(point))
        if record.ok and math.isfinite(record.seconds) and record.seconds > 0:
            self.scores.append(-math.log(record.seconds))
        else:
            self.scores.append(None)

    def next_batch(self, n: int) -> List[Point]:
        out = []
        for p in self._propose(n):
            p = tuple(int(x) for x in p)
            if p not in self.visited:
                self.visited.add(p)
                out.append(p)
        return out

    def _propose(self, n) -> Iterable[Point]:
        raise NotImplementedError

    # ---------------------------------------------------------------- helpers
    def _random_points(self, n) -> List[Point]:
        size = self.space.size
        left = size - len(self.visited)
        if left <= 0:
            return []
        out, seen = [], set()
        if size <= 200_000 and left <= 4 * n:
            # nearly exhausted: enumerate what is left
            rest = [self.space.point_from_index(i) for i in range(size)]
            rest = [p for p in rest if p not in self.visited]
            self.rng.shuffle(rest)
            return rest[:n]
        tries = 0
        while len(out) < n and tries < 50 * n + 100:
            tries += 1
            p = tuple(int(self.rng.integers(d)) for d in self.dims)
            if p not in self.visited and p not in seen:
                seen.add(p)
                out.append(p)
        return out


class RandomTuner(Tuner):
    name = "random"

    def _propose(self, n):
        return self._random_points(n)


class GridTuner(Tuner):
    name = "grid"

    def __init__(self, space, seed=0):
        super().__init__(space, seed)
        self._next = 0

    def _propose(self, n):
        out = []
        size = self.space.size
        while len(out) < n and self._next < size:
            p = self.space.point_from_index(self._next)
            self._next += 1
            if p not in self.visited:
                out.append(p)
        return out


class ModelTuner(Tuner):
    """Simulated annealing over a cost model trained on the measurements so far."""

    name = "model"

    def __init__(self, space, seed=0, model="gbt", warmup=8, n_chains=64, n_steps=60,
                 explore=0.2, **model_kw):
        super().__init__(space, seed)
        if model not in MODELS:
            raise AutotuneError(f"ModelTuner: unknown model {model!r}; use one of {sorted(MODELS)}")
        self.model_name = model
        self.model_kw = model_kw
        self.warmup, self.n_chains, self.n_steps, self.explore = warmup, n_chains, n_steps, explore
        self.features = FeatureTable(space)
        self.model = None
        self._tunable = [k for k, d in enumerate(self.dims) if d > 1]

    def _fit(self):
        ok = [s for s in self.scores if s is not None]
        if len(ok) < max(2, self.warmup):
            return False
        low = min(ok) - 0.5 * (max(ok) - min(ok) + 1e-3)     # failures rank below the worst
        y = np.array([s if s is not None else low for s in self.scores])
        X = self.features(self.points)
        kw = dict(self.model_kw)
        if self.model_name == "gbt":
            kw.setdefault("seed", int(self.rng.integers(1 << 30)))
        self.model = MODELS[self.model_name](**kw).fit(X, y)
        self._yspread = float(np.std(y)) or 1.0
        return True

    def predict(self, points) -> np.ndarray:
        return self.model.predict(self.features(points))

    def _mutate(self, P):
        P = P.copy()
        n = len(P)
        knobs = self.rng.choice(self._tunable, size=n)
        for row, k in enumerate(knobs):
            d = self.dims[k]
            if self.rng.random() < 0.5:     # a nearby candidate (candidates are sorted)
                step = int(self.rng.integers(1, 3)) * (1 if self.rng.random() < 0.5 else -1)
                P[row, k] = min(max(P[row, k] + step, 0), d - 1)
            else:
                P[row, k] = int(self.rng.integers(d))
        return P

    def _propose(self, n):
        if not self._tunable or not self._fit():
            return self._random_points(n)
        n_model = max(1, int(round(n * (1 - self.explore))))
        # start the chains at the best measured points and at random ones
        measured = [(s, p) for s, p in zip(self.scores, self.points) if s is not None]
        measured.sort(reverse=True)
        starts = [p for _, p in measured[: self.n_chains // 2]]
        starts += self._random_points(self.n_chains - len(starts)) or []
        while len(starts) < self.n_chains:
            starts.append(starts[len(starts) % max(1, len(starts))])
        cur = np.array(starts, dtype=np.int64)
        cur_s = self.predict(cur)
        pool: Dict[Point, float] = {}
        for p, s in zip(map(tuple, cur.tolist()), cur_s):
            if p not in self.visited:
                pool[p] = float(s)
        t0 = self._yspread
        for step in range(self.n_steps):
            temp = t0 * (1 - step / self.n_steps) + 1e-3
            new = self._mutate(cur)
            new_s = self.predict(new)
            accept = (new_s >= cur_s) | (self.rng.random(len(cur)) < np.exp((new_s - cur_s) / temp))
            cur[accept] = new[accept]
            cur_s[accept] = new_s[accept]
            for p, s in zip(map(tuple, new.tolist()), new_s):
                if p not in self.visited:
                    pool[p] = float(s)
        ranked = sorted(pool.items(), key=lambda kv: -kv[1])
        out = [p for p, _ in ranked[:n_model]]
        taken = set(out)
        for p in self._random_points(n - len(out) + 4):
            if len(out) >= n:
                break
            if p not in taken:
                out.append(p)
        return out


TUNERS = {"random": RandomTuner, "grid": GridTuner, "model": ModelTuner}


def make_tuner(tuner, space, seed=0) -> Tuner:
    if isinstance(tuner, Tuner):
        return tuner
    if isinstance(tuner, str) and tuner in TUNERS:
        return TUNERS[tuner](space, seed=seed)
    raise AutotuneError(f"tune: unknown tuner {tuner!r}; use one of {sorted(TUNERS)} or a Tuner")
