"""The scaling model T(W) = G/W + C(W) (strong) or G + C(W) (weak), fitted to the measured step times
by an exact non-negative least squares, and the efficiency it predicts."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from .plan import MODES
from .results import Row

PARAMETERS = ("G", "a", "b")


@dataclass(frozen=True)
class Fit:
    """T(W) = G/W + a*2(W-1)/W + b*(W-1) (strong), or G + ... (weak); seconds per step.

    `identifiable` is False for a or b when the worker counts cannot tell them apart: with W in
    {1, 2} only, 2(W-1)/W and W-1 are both 1, so C(2) = a + b is all reported as a.
    """

    mode: str
    G: float
    a: float
    b: float
    residual: float
    identifiable: dict[str, bool] = field(default_factory=dict)

    def step_seconds(self, workers: float) -> float:
        """The model's time per step on `workers` ranks."""
        compute = self.G / workers if self.mode == "strong" else self.G
        return compute + communication(workers, self.a, self.b)


def communication(workers: float, a: float, b: float) -> float:
    """C(W) = a*2(W-1)/W + b*(W-1); zero on one worker.

    >>> communication(1, 0.5, 0.1), communication(4, 0.5, 0.1)
    (0.0, 1.05)
    """
    return a * 2 * (workers - 1) / workers + b * (workers - 1)


def _design(mode: str, workers: np.ndarray) -> np.ndarray:
    compute = 1.0 / workers if mode == "strong" else np.ones_like(workers)
    return np.column_stack([compute, 2 * (workers - 1) / workers, workers - 1])


SEPARATION = 1e-3
"""Terms whose column-normalised design has its smallest singular value below this fraction of its
largest are taken as inseparable: worker counts close together (42, 43, 44) make G and a nearly the
same column, and measured step times carry far more than 0.1 % noise."""


def separates(columns: np.ndarray) -> bool:
    """True when the design's columns (one per term) can be told apart from measured times.

    >>> separates(_design("weak", np.array([1.0, 2.0, 4.0]))), separates(_design("weak", np.array([42.0, 43.0, 44.0])))
    (True, False)
    """
    norms = np.linalg.norm(columns, axis=0)
    if columns.shape[0] < columns.shape[1] or not norms.all():
        return False
    singular = np.linalg.svd(columns / norms, compute_uv=False)
    return bool(singular[-1] > SEPARATION * singular[0])


def fit_model(mode: str, workers: Sequence[float], seconds: Sequence[float]) -> Fit | None:
    """Least squares of the step times with G, a, b >= 0 (an exact non-negative least squares:
    every subset of the three terms is solved, the best non-negative one wins, ties go to fewer
    terms). None without a point to fit.

    >>> f = fit_model("strong", [1, 2, 4], [0.08, 0.045, 0.0275])
    >>> round(f.G, 6), round(f.a, 6), round(f.b, 6)
    (0.08, 0.005, 0.0)
    """
    w = np.asarray(workers, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if w.size == 0:
        return None
    design = _design(mode, w)
    scale = max(float(np.abs(t).max()), 1e-300)
    candidates: list[tuple[float, tuple[int, ...], np.ndarray]] = []
    for size in range(1, 4):
        for subset in itertools.combinations(range(3), size):
            coef, *_ = np.linalg.lstsq(design[:, subset], t, rcond=None)
            if (coef < -1e-12 * scale).any():
                continue
            coef = np.clip(coef, 0.0, None)
            candidates.append((float(np.sum((design[:, subset] @ coef - t) ** 2)), subset, coef))
    # The G-only subset always has a non-negative solution for positive times, so there is one.
    floor = min(c[0] for c in candidates) + 1e-20 * scale**2 * len(t)  # within rounding of the best: prefer fewer terms
    residual, subset, coef = min((c for c in candidates if c[0] <= floor), key=lambda c: (len(c[1]), c[1]))
    values = dict.fromkeys(PARAMETERS, 0.0)
    for index, value in zip(subset, coef, strict=True):
        values[PARAMETERS[index]] = float(value)
    distinct = _design(mode, np.array(sorted(set(w.tolist()))))
    identifiable = {"G": True, "a": separates(distinct[:, :2]), "b": separates(distinct)}
    return Fit(mode, values["G"], values["a"], values["b"], residual, identifiable)


def fits(rows: Iterable[Row]) -> dict[str, Fit]:
    """Mode -> the model fitted to that mode's measured points."""
    found = {}
    rows = list(rows)
    for mode in MODES:
        measured = [r for r in rows if r.point.mode == mode and r.step_seconds is not None]
        fitted = fit_model(mode, [r.point.ranks for r in measured], [r.step_seconds for r in measured])
        if fitted is not None:
            found[mode] = fitted
    return found


def model_efficiency(fit: Fit, ranks: int, base_ranks: int) -> float:
    """The efficiency the model predicts at `ranks`, against the model at `base_ranks`."""
    t_base, t = fit.step_seconds(base_ranks), fit.step_seconds(ranks)
    if fit.mode == "strong":
        return (base_ranks * t_base) / (ranks * t)
    return t_base / t
