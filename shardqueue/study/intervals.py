"""Small-sample statistics of the study's seeds: Student's t quantile, the paired interval of a
mean difference, a seed spread that does not grow with the number of seeds, and a least-squares
slope judged against its own standard error.

Why a t interval and not a paired bootstrap: the study has a handful of seeds (two in the
proposal's setting). A bootstrap of n paired differences has at most n^n resamples; at n = 2
its mean takes three values and its 95% interval is the range of the two differences, far
narrower than the uncertainty. The t interval with n - 1 degrees of freedom is exact when the
paired differences are normal and stays honest at small n (12.7 standard errors either side
at n = 2). Its assumption, roughly normal differences, is stated in the report.

The t distribution's CDF is integrated numerically (Simpson's rule on its density) and the
quantile found by bisection: numpy only, no scipy in this environment.
"""
import math

import numpy as np

SIMPSON_INTERVALS = 4000  # even; the density is smooth, so the CDF is exact to far below 1e-9 here


def t_density(x, df):
    x = np.asarray(x, dtype=float)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))


def t_cdf(x, df):
    """P(T <= x) for Student's t with df degrees of freedom (df > 0)."""
    if x < 0:
        return 1.0 - t_cdf(-x, df)
    grid = np.linspace(0.0, x, SIMPSON_INTERVALS + 1)
    f = t_density(grid, df)
    h = x / SIMPSON_INTERVALS
    return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())


def t_quantile(p, df):
    """The x with P(T <= x) = p, for 0.5 <= p < 1 (bisection to 1e-10)."""
    if not 0.5 <= p < 1 or not df > 0:
        raise ValueError(f"t quantile needs 0.5 <= p < 1 and df > 0 (got p={p}, df={df})")
    hi = 2.0
    while t_cdf(hi, df) < p:
        hi *= 2
    lo = 0.0
    while hi - lo > 1e-10:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def paired_interval(diffs, level=0.95):
    """{"n", "df", "mean", "sd", "se", "t", "low", "high", "level"}: the t interval of the mean of paired
    differences (one per seed). Needs two or more differences."""
    d = [float(v) for v in diffs]
    n = len(d)
    if n < 2:
        raise ValueError(f"an interval needs at least two paired differences (got {n})")
    mean = sum(d) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in d) / (n - 1))
    se = sd / math.sqrt(n)
    t = t_quantile(0.5 + level / 2, n - 1)
    return {"n": n, "df": n - 1, "mean": mean, "sd": sd, "se": se, "t": t, "low": mean - t * se,
            "high": mean + t * se, "level": level}


def mean_pairwise_difference(values):
    """The mean of |x_i - x_j| over all pairs i < j: what the one difference of two seeds measures (it
    estimates E|X - X'|), whatever the number of seeds."""
    v = [float(x) for x in values]
    pairs = [abs(a - b) for i, a in enumerate(v) for b in v[i + 1:]]
    if not pairs:
        raise ValueError("a seed spread needs at least two seeds")
    return sum(pairs) / len(pairs)


def largest_pairwise_difference(values):
    """max - min: the literal "largest within-arm difference" over all pairs (it grows with the number of seeds)."""
    v = [float(x) for x in values]
    if len(v) < 2:
        raise ValueError("a seed spread needs at least two seeds")
    return max(v) - min(v)


def judged_slope(x, y, level=0.95):
    """{"beta", "se", "t", "df", "crit", "falls"}: the least-squares slope of y on x, its standard error
    and whether it falls at `level` (one-sided: t = beta / se below -t(level, n - 2)).

    A sign test is not enough: a flat curve's fitted slope is rounding noise whose sign follows the BLAS
    kernel (np.polyfit: -5e-16 on AVX-512, +4e-16 on Haswell). Plain sums (math.fsum), no BLAS, so every
    CPU gives the same answer; se is floored at what float64 rounding of y alone could move the slope by.
    Needs n >= 3 points and x not all equal (ValueError otherwise)."""
    n = len(x)
    if n != len(y) or n < 3:
        raise ValueError(f"a slope with a standard error needs 3 or more (x, y) pairs (got {n} and {len(y)})")
    xm, ym = math.fsum(x) / n, math.fsum(y) / n
    sxx = math.fsum((a - xm) ** 2 for a in x)
    if not sxx > 0:
        raise ValueError("every x is the same: no slope")
    beta = math.fsum((a - xm) * (b - ym) for a, b in zip(x, y)) / sxx
    sse = math.fsum((b - ym - beta * (a - xm)) ** 2 for a, b in zip(x, y))
    rounding = n * np.finfo(float).eps * max(abs(b) for b in y)  # y's float64 error after n-term sums
    se = max(math.sqrt(sse / (n - 2) / sxx), rounding / math.sqrt(sxx))
    df, t = n - 2, (beta / se if se > 0 else 0.0)  # se = 0 only when every y is 0: then beta is exactly 0
    crit = t_quantile(level, df)
    return {"beta": beta, "se": se, "t": t, "df": df, "crit": crit, "falls": t < -crit}


def slope_text(s, level=0.95):
    """'slope -0.002 +/- 0.0042, t = -0.47 with 3 df; falling needs t < -2.353 (one-sided 95%)'."""
    return (f"slope {s['beta']:+.4g} +/- {s['se']:.2g}, t = {s['t']:+.2f} with {s['df']} df; falling needs "
            f"t < {-s['crit']:.3f} (one-sided {level:.0%})")
