"""Summaries over seeds: mean, standard deviation, confidence intervals, and paired
comparisons of two methods run on the same seeds.

Few seeds is the normal case (3-5 per method), so the intervals are Student t intervals
of the mean (exact under normally distributed per-seed values), not bootstrap intervals,
which cover less than their nominal level at such n. The t distribution is computed here
from its closed form for integer degrees of freedom (numpy only); the tests compare it with
scipy's. The percentile bootstrap is kept for those who ask for it.

A paired comparison matches two methods' runs by seed (same seed = same prompts, same
initial weights) and reports the mean difference with its t interval, the paired t test,
the exact sign-flip (permutation) test and the smallest difference the seeds could have
detected.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from gdpo_nemo.errors import UserError

DEFAULT_RESAMPLES = 10_000
INTERVALS = ("t", "bootstrap")
# The sign-flip test enumerates all 2^n sign patterns up to this many pairs; above it the
# p-value is estimated from this many random patterns (seeded).
EXACT_SIGN_FLIP_PAIRS = 16
SIGN_FLIP_SAMPLES = 200_000


def _dof(df) -> int:
    if isinstance(df, bool) or int(df) != df or df < 1:
        raise UserError(f"df = {df!r}; expected a positive integer (degrees of freedom)")
    return int(df)


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with `df` (a positive integer) degrees of freedom.

    The finite series in cos(theta), theta = atan(t / sqrt(df)) (Abramowitz & Stegun
    26.7.3-4), which is exact for integer df; accurate to ~1e-15 for df up to a few hundred.
    """
    df = _dof(df)
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
        term, total = 1.0, 0.0
        if df > 1:
            total = 1.0
            for k in range(1, (df - 3) // 2 + 1):
                term *= c2 * (2 * k) / (2 * k + 1)
                total += term
        inside = (2 / math.pi) * (theta + s * math.cos(theta) * total) if df > 1 else 2 * theta / math.pi
    else:  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        term, total = 1.0, 1.0
        for k in range(1, (df - 2) // 2 + 1):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = s * total
    inside = min(max(inside, 0.0), 1.0)  # P(|T| <= |t|)
    return 0.5 + 0.5 * inside if t >= 0 else 0.5 - 0.5 * inside


def t_quantile(p: float, df: int) -> float:
    """The t with t_cdf(t, df) = p, 0 < p < 1 (bisection to float precision)."""
    df = _dof(df)
    if not 0 < p < 1:
        raise UserError(f"p = {p!r}; expected a probability strictly between 0 and 1")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2
        if high > 1e300:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (low + high)
        if mid in (low, high):
            break
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def _finite(values, what: str) -> np.ndarray:
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(data)):
        raise UserError(f"{what}: values must be finite, got {data[~np.isfinite(data)][:3].tolist()}; drop NaN/inf first and report them")
    return data


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise UserError(f"confidence = {confidence!r}; expected a number strictly between 0 and 1")


def t_interval(values, *, confidence: float = 0.95) -> tuple[float, float]:
    """Student t interval of the mean of `values`: mean -+ t_{(1+c)/2, n-1} * std / sqrt(n).

    Fewer than two values give (nan, nan): one seed says nothing about the spread. Equal
    values give (v, v).
    """
    _check_confidence(confidence)
    data = _finite(values, "t_interval")
    if data.size < 2:
        return math.nan, math.nan
    mean, sd = float(data.mean()), float(data.std(ddof=1))
    half = t_quantile((1 + confidence) / 2, data.size - 1) * sd / math.sqrt(data.size)
    return mean - half, mean + half


def bootstrap_interval(values, *, confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (1-D, finite).

    Draws `resamples` samples of len(values) with replacement (seeded: the same input gives
    the same interval) and returns the (1-c)/2 and (1+c)/2 quantiles of their means. One
    value gives (v, v); no value gives (nan, nan). With 5 seeds it covers the mean less
    often than `confidence` says; `t_interval` is the default of the tables.
    """
    _check_confidence(confidence)
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    if data.size == 0:
        return math.nan, math.nan
    if data.size == 1 or np.all(data == data[0]):
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def clip_interval(low: float, high: float, bounds: tuple[float, float] | None) -> tuple[float, float, bool]:
    """(low, high, clipped): the interval cut to `bounds` (lowest, highest value the quantity
    can take; None: unbounded). A t interval of a rate near 0 or 1 leaves [0, 1] (mean
    0.997, sd 0.008, n 7: [0.990, 1.004]); the part outside is impossible, so it is cut and
    the table says so (`clipped`). NaN stays NaN."""
    if bounds is None or math.isnan(low) or math.isnan(high):
        return low, high, False
    lowest, highest = bounds
    clipped_low, clipped_high = min(max(low, lowest), highest), max(min(high, highest), lowest)
    return clipped_low, clipped_high, (clipped_low, clipped_high) != (low, high)


def summarize(values, *, confidence: float = 0.95, interval: str = "t", resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
              bounds: tuple[float, float] | None = None) -> dict:
    """{"mean", "std" (ddof 1; nan below 2 values), "low", "high", "n", "clipped"} of finite
    `values`.

    `interval`: "t" (default; Student t interval of the mean, nan below 2 values) or
    "bootstrap" (percentile bootstrap of the mean with `resamples` draws). `bounds`: the
    range the values can take (a rate: (0, 1)); the interval is cut to it and "clipped"
    says whether that changed it (`clip_interval`).
    """
    if interval not in INTERVALS:
        raise UserError(f"interval = {interval!r}; expected one of {', '.join(INTERVALS)}")
    data = _finite(values, "summarize")
    if interval == "t":
        low, high = t_interval(data, confidence=confidence)
    else:
        low, high = bootstrap_interval(data, confidence=confidence, resamples=resamples, seed=seed)
    low, high, clipped = clip_interval(low, high, bounds)
    return {
        "mean": float(data.mean()) if data.size else math.nan,
        "std": float(data.std(ddof=1)) if data.size > 1 else math.nan,
        "low": low,
        "high": high,
        "n": int(data.size),
        "clipped": clipped,
    }


def sign_flip_p(differences, *, seed: int = 0) -> float:
    """Two-sided p-value of the sign-flip (paired permutation) test of mean difference 0.

    Under the null each paired difference is as likely to have either sign, so p is the
    share of the 2^n sign patterns whose |mean| is at least the observed one (exact up to
    `EXACT_SIGN_FLIP_PAIRS` pairs, else estimated from `SIGN_FLIP_SAMPLES` seeded patterns).
    Its smallest possible value is 2 / 2^n (n = 5: 0.0625), whatever the data.
    """
    d = _finite(differences, "sign_flip_p")
    if d.size == 0:
        return math.nan
    observed = abs(float(d.mean()))
    tolerance = 1e-12 * max(1.0, float(np.abs(d).max()))
    if d.size <= EXACT_SIGN_FLIP_PAIRS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(SIGN_FLIP_SAMPLES, d.size))
    means = np.abs(signs @ d) / d.size
    return float(np.mean(means >= observed - tolerance))


def paired_comparison(a, b, *, confidence: float = 0.95, power: float = 0.8,
                      bounds: tuple[float, float] | None = None) -> dict:
    """Compare `a` with `b`, two equal-length sequences of per-seed values in seed order.

    Returns {"n", "mean_diff" (a - b), "std_diff", "low", "high" (t interval of the mean
    difference), "t", "p_t" (paired t test, two-sided), "p_sign_flip" (exact sign-flip
    test), "min_p_sign_flip" (the smallest p the sign-flip test can give with n pairs),
    "mde"}. `mde` is the smallest true mean difference the paired t test at level
    1 - confidence detects with probability `power`, given the observed spread of the
    differences: (t_{1-alpha/2} + t_{power}) * std_diff / sqrt(n), df = n - 1 (the usual
    approximation to the noncentral t). Fewer than two pairs give nan statistics.
    `bounds`: the range of the values of `a` and `b`; the interval of the difference is cut
    to (lowest - highest, highest - lowest) and "clipped" says whether that changed it.
    """
    _check_confidence(confidence)
    if not 0 < power < 1:
        raise UserError(f"power = {power!r}; expected a probability strictly between 0 and 1")
    x, y = _finite(a, "paired_comparison"), _finite(b, "paired_comparison")
    if x.shape != y.shape:
        raise UserError(f"paired_comparison: {x.size} values against {y.size}; pairs need one value of each per seed")
    d = x - y
    n = int(d.size)
    out = {"n": n, "mean_diff": float(d.mean()) if n else math.nan, "std_diff": math.nan, "low": math.nan,
           "high": math.nan, "t": math.nan, "p_t": math.nan, "p_sign_flip": sign_flip_p(d) if n else math.nan,
           "min_p_sign_flip": 2.0 / 2 ** n if n else math.nan, "mde": math.nan, "clipped": False}
    if n < 2:
        return out
    sd = float(d.std(ddof=1))
    out["std_diff"] = sd
    spread = None if bounds is None else (bounds[0] - bounds[1], bounds[1] - bounds[0])
    out["low"], out["high"], out["clipped"] = clip_interval(*t_interval(d, confidence=confidence), spread)
    alpha = 1 - confidence
    out["mde"] = (t_quantile(1 - alpha / 2, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)
    if sd == 0:
        out["t"] = 0.0 if out["mean_diff"] == 0 else math.copysign(math.inf, out["mean_diff"])
        out["p_t"] = 1.0 if out["mean_diff"] == 0 else 0.0
    else:
        out["t"] = out["mean_diff"] / (sd / math.sqrt(n))
        out["p_t"] = 2 * (1 - t_cdf(abs(out["t"]), n - 1))
    return out
