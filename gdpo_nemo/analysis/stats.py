"""Summaries over seeds: mean, standard deviation and a percentile bootstrap interval."""

from __future__ import annotations

import math

import numpy as np

DEFAULT_RESAMPLES = 10_000


def bootstrap_interval(values, *, confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (1-D, finite).

    Draws `resamples` samples of len(values) with replacement (seeded: the same input gives
    the same interval) and returns the (1-c)/2 and (1+c)/2 quantiles of their means. One
    value gives (v, v); no value gives (nan, nan). With 5 seeds the interval is the
    spread of means of resampled seeds, not a guarantee of 95 % coverage: a reader should
    weigh n beside it.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence = {confidence!r}; expected a number strictly between 0 and 1")
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    if data.size == 0:
        return math.nan, math.nan
    if data.size == 1 or np.all(data == data[0]):
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def summarize(values, *, confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict:
    """{"mean", "std" (ddof 1; nan below 2 values), "low", "high" (bootstrap), "n"} of finite `values`."""
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(data)):
        raise ValueError(f"summarize: values must be finite, got {data[~np.isfinite(data)][:3].tolist()}; drop NaN/inf first and report them")
    low, high = bootstrap_interval(data, confidence=confidence, resamples=resamples, seed=seed)
    return {
        "mean": float(data.mean()) if data.size else math.nan,
        "std": float(data.std(ddof=1)) if data.size > 1 else math.nan,
        "low": low,
        "high": high,
        "n": int(data.size),
    }
