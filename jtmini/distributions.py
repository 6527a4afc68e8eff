"""Probability distributions, Jittor style (``jt.distributions``): sampling, ``log_prob``,
``entropy`` and ``kl_divergence`` with PyTorch's formulas.

    >>> import jtmini as jt
    >>> import jtmini.distributions as jd
    >>> d = jd.Categorical(jt.array([0.2, 0.3, 0.5]))
    >>> d.sample((4,)).shape, d.entropy().shape
    ((4,), ())
    >>> jd.kl_divergence(jd.Normal(0.0, 1.0), jd.Normal(1.0, 2.0)).item()
    0.4431471824645996
"""
import math
import numbers

import numpy as np

from . import creation, dtypes
from .ops import random_op
from .ops.registry import FUNCTIONS
from .var import Var


def _var(value, what, who):
    """``value`` as a float Var: a number or array becomes float32 (PyTorch's default float)."""
    if isinstance(value, Var):
        return value if dtypes.is_float(value.dtype) else value.cast("float32")
    if isinstance(value, (numbers.Real, np.ndarray, list, tuple)) and not isinstance(value, bool):
        return creation.array(np.asarray(value, "float32"))
    raise TypeError(f"{who}: {what} must be a number, array or Var, got {type(value).__name__}")


def _shape(sample_shape, who):
    if isinstance(sample_shape, numbers.Integral):
        return (int(sample_shape),)
    if not isinstance(sample_shape, (tuple, list)) or not all(isinstance(n, numbers.Integral) and n >= 0
                                                              for n in sample_shape):
        raise TypeError(f"{who}.sample: sample_shape must be a tuple of ints >= 0, got {sample_shape!r}")
    return tuple(int(n) for n in sample_shape)


def simple_presum(x):
    """The running sums of ``x`` along its last axis with a leading 0: shape (..., n + 1).

    >>> jd.simple_presum(jt.array([[1, 2, 3, 4]])).numpy()
    array([[ 0,  1,  3,  6, 10]])
    """
    if not isinstance(x, Var) or x.ndim == 0:
        raise ValueError(f"simple_presum: x must be a Var of at least one dimension, got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    zero = creation.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    return FUNCTIONS["concat"]([zero, FUNCTIONS["cumsum"](x, x.ndim - 1)], x.ndim - 1)


def lgamma(x):
    """``log|Gamma(x)|`` elementwise (``jt.lgamma``), differentiable (its gradient is digamma)."""
    return FUNCTIONS["lgamma"](x)


class Categorical:
    """A distribution over ``0 .. n-1`` given by ``probs`` (normalised along the last axis) or
    ``logits`` (PyTorch's meaning: ``probs = softmax(logits)``); leading axes are a batch.

    >>> jd.Categorical(jt.array([0.25, 0.25, 0.5])).sample((2, 3)).shape
    (2, 3)
    """

    def __init__(self, probs=None, logits=None):
        who = type(self).__name__
        if (probs is None) == (logits is None):
            raise ValueError(f"{who}: give exactly one of probs and logits")
        if probs is None:
            probs = _var(logits, "logits", who).softmax(-1)
        probs = _var(probs, "probs", who)
        if probs.ndim == 0:
            raise ValueError(f"{who}: probs must have at least one dimension (the categories), got a 0-d value")
        self.probs = probs / probs.sum(-1, keepdims=True)
        # clamped so that a zero probability gives a finite logit: 0 * logit stays 0 in entropy
        self.logits = self.probs.maximum(np.finfo(self.probs.dtype).tiny).log()
        self.cum_probs = simple_presum(self.probs.detach())

    def _index(self, sample_shape):
        """Indices drawn by inverse transform: the count of cumulative sums below a uniform draw."""
        n = self.probs.shape[-1]
        shape = _shape(sample_shape, type(self).__name__) + self.probs.shape[:-1]
        draw = random_op.rand(*(shape + (1,)))
        right = self.cum_probs[..., 1:]
        return (right < draw).int32().sum(-1).minimum(n - 1)      # rounding may leave right[-1] < 1

    def sample(self, sample_shape=()):
        """int32 indices of shape ``sample_shape + batch_shape``."""
        return self._index(sample_shape)

    def log_prob(self, value):
        """``log probs[value]`` for integer ``value`` broadcast against the batch shape."""
        value = value if isinstance(value, Var) else creation.array(np.asarray(value))
        if dtypes.is_float(value.dtype) and not isinstance(self, OneHotCategorical):
            value = value.int64()
        hot = value.reshape(value.shape + (1,)) == FUNCTIONS["arange"](self.probs.shape[-1])
        return (hot.cast(self.logits.dtype) * self.logits).sum(-1)

    def entropy(self):
        return -(self.probs * self.logits).sum(-1)


class OneHotCategorical(Categorical):
    """``Categorical`` whose samples and ``log_prob`` values are one-hot vectors (float32).

    >>> jd.OneHotCategorical(jt.array([0.5, 0.5])).sample((3,)).shape
    (3, 2)
    """

    def sample(self, sample_shape=()):
        index = self._index(sample_shape)
        hot = index.reshape(index.shape + (1,)) == FUNCTIONS["arange"](self.probs.shape[-1]).int32()
        return hot.float32()

    def log_prob(self, value):
        """``log probs[k]`` with ``k`` the index of the largest entry of ``value`` along the last
        axis (its first, on ties): a one-hot vector's hot index, and for any other vector the
        category PyTorch and Jittor read from it too.

        >>> jd.OneHotCategorical(jt.array([0.25, 0.75])).log_prob([[0.0, 1.0], [3.0, 2.0]]).numpy()
        array([-0.2876821, -1.3862944], dtype=float32)
        """
        value = value if isinstance(value, Var) else creation.array(np.asarray(value))
        if value.ndim == 0 or value.shape[-1] != self.probs.shape[-1]:
            raise ValueError(f"OneHotCategorical.log_prob: value must be one-hot over "
                             f"{self.probs.shape[-1]} categories (last axis), got shape {value.shape}")
        return Categorical.log_prob(self, value.argmax(-1)[0])


class Normal:
    """The normal distribution N(mu, sigma^2); ``mu`` and ``sigma`` numbers or float Vars.

    >>> jd.Normal(0.0, 2.0).sample((5,)).shape
    (5,)
    """

    def __init__(self, mu, sigma):
        self.mu, self.sigma = _var(mu, "mu", "Normal"), _var(sigma, "sigma", "Normal")

    def sample(self, sample_shape=()):
        shape = _shape(sample_shape, "Normal") + np.broadcast_shapes(self.mu.shape, self.sigma.shape)
        return self.mu + self.sigma * random_op.randn(*shape)

    def log_prob(self, x):
        x = _var(x, "x", "Normal.log_prob")
        return -(x - self.mu) ** 2 / (2 * self.sigma ** 2) - self.sigma.log() - 0.5 * math.log(2 * math.pi)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.sigma.log()


class Uniform:
    """The uniform distribution on [low, high); ``log_prob`` is -inf outside it.

    >>> jd.Uniform(0.0, 2.0).entropy().item()
    0.6931471824645996
    """

    def __init__(self, low, high):
        self.low, self.high = _var(low, "low", "Uniform"), _var(high, "high", "Uniform")
        if not bool((self.high > self.low).all().item()):
            raise ValueError(f"Uniform: high must be greater than low, got low={low!r}, high={high!r}")

    def sample(self, sample_shape=()):
        shape = _shape(sample_shape, "Uniform") + np.broadcast_shapes(self.low.shape, self.high.shape)
        return self.low + (self.high - self.low) * random_op.rand(*shape)

    def log_prob(self, x):
        x = _var(x, "x", "Uniform.log_prob")
        inside = (x >= self.low).logical_and(x < self.high)
        return FUNCTIONS["where"](inside, -(self.high - self.low).log(), -math.inf)

    def entropy(self):
        return (self.high - self.low).log()


class Geometric:
    """The number of failures before the first success of trials with success probability ``p``
    (or ``logits``, ``p = sigmoid(logits)``), as PyTorch's ``Geometric``.

    >>> jd.Geometric(0.5).log_prob(2).item()
    -2.079441547393799
    """

    def __init__(self, p=None, logits=None):
        if (p is None) == (logits is None):
            raise ValueError("Geometric: give exactly one of p and logits")
        if p is None:
            self.logits = _var(logits, "logits", "Geometric")
            self.prob = self.logits.sigmoid()
        else:
            self.prob = _var(p, "p", "Geometric")
            if not bool(((self.prob > 0).logical_and(self.prob < 1)).all().item()):
                raise ValueError(f"Geometric: p must be in (0, 1), got {p!r}")
            self.logits = self.prob.log() - (1 - self.prob).log()

    def sample(self, sample_shape=()):
        shape = _shape(sample_shape, "Geometric") + self.prob.shape
        u = random_op.rand(*shape).maximum(np.finfo("float32").tiny)
        return (u.log() / (1 - self.prob).log()).floor()

    def log_prob(self, x):
        return _var(x, "x", "Geometric.log_prob") * (1 - self.prob).log() + self.prob.log()

    def entropy(self):
        q = 1 - self.prob
        return -(self.prob * self.prob.log() + q * q.log()) / self.prob


def _draws(n, kind):
    """``n`` float64 draws ("uniform" in [0, 1) or "normal") from Jittor's seeded engine."""
    return random_op.random((n,), "float64", kind).numpy()


def _standard_gamma(alpha, shape):
    """Gamma(alpha, 1) draws of ``shape`` (``alpha`` broadcast to it), by Marsaglia and Tsang's
    rejection method (drawing again only for the rejected), alpha < 1 boosted by U ** (1 / alpha)."""
    alpha = np.broadcast_to(np.asarray(alpha, np.float64), shape).ravel()
    a = np.where(alpha < 1, alpha + 1, alpha)
    d = a - 1.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * d)
    out, left = np.empty(a.size), np.arange(a.size)
    while left.size:
        z, u = _draws(left.size, "normal"), _draws(left.size, "uniform")
        v = (1.0 + c[left] * z) ** 3
        with np.errstate(divide="ignore", invalid="ignore"):
            ok = (v > 0) & (np.log(u) < 0.5 * z * z + d[left] * (1.0 - v + np.log(v)))
        out[left[ok]] = d[left[ok]] * v[ok]
        left = left[~ok]
    small = alpha < 1
    if small.any():
        out[small] *= _draws(int(small.sum()), "uniform") ** (1.0 / alpha[small])
    return out.reshape(shape)


_lgamma64 = np.frompyfunc(math.lgamma, 1, 1)


def _gammainc(a, x):
    """P(a, x), the regularised lower incomplete gamma function, in float64: the series below
    a + 1, Lentz's continued fraction for 1 - P above (Numerical Recipes, 6.2)."""
    a, x = (np.asarray(v, np.float64) for v in np.broadcast_arrays(a, x))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        front = np.exp(a * np.log(x) - x - _lgamma64(a).astype(np.float64))
        term = total = 1.0 / a
        for n in range(1, 1000):                     # sum x^n / (a (a+1) ... (a+n))
            term = term * x / (a + n)
            total = total + term
            if np.all(np.abs(term) <= np.abs(total) * 1e-16):
                break
        tiny = 1e-300
        b = x + 1.0 - a
        c, dd = np.full(b.shape, 1.0 / tiny), 1.0 / np.where(b == 0, tiny, b)
        h = dd
        for n in range(1, 1000):
            an, b = -n * (n - a), b + 2.0
            dd = an * dd + b
            dd = 1.0 / np.where(np.abs(dd) < tiny, tiny, dd)
            c = b + an / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            h = h * dd * c
            if np.all(np.abs(dd * c - 1.0) <= 1e-16):
                break
        p = np.where(x < a + 1.0, front * total, 1.0 - front * h)
    return np.where(x <= 0, 0.0, np.where(np.isinf(x), 1.0, p))


class GammaDistribution:
    """The gamma distribution of shape ``concentration`` and ``rate`` (numbers or float Vars),
    density rate^a x^(a-1) e^(-rate x) / Gamma(a), as Jittor's (which runs on CUDA only) and
    PyTorch's ``Gamma``. ``sample`` draws from Jittor's seeded engine (``jt.set_seed``);
    ``log_prob`` and ``entropy`` are differentiable; ``cdf`` is computed now, in float64.

    >>> g = jd.GammaDistribution(2.0, 0.5)
    >>> g.mean().item(), g.variance().item(), g.sample((4,)).shape
    (4.0, 8.0, (4,))
    """

    def __init__(self, concentration, rate):
        self.concentration = _var(concentration, "concentration", "GammaDistribution")
        self.rate = _var(rate, "rate", "GammaDistribution")
        for name, value in (("concentration", self.concentration), ("rate", self.rate)):
            if not bool((value > 0).all().item()):
                raise ValueError(f"GammaDistribution: {name} must be > 0, got {value.numpy()!r}")
        self.lgamma_alpha = lgamma(self.concentration)

    def sample(self, sample_shape=()):
        shape = _shape(sample_shape, "GammaDistribution") + np.broadcast_shapes(self.concentration.shape,
                                                                                 self.rate.shape)
        draws = _standard_gamma(self.concentration.numpy(), shape) / np.broadcast_to(self.rate.numpy(), shape)
        return creation.array(draws.astype(self.concentration.dtype))

    def log_prob(self, value):
        x, a = _var(value, "value", "GammaDistribution.log_prob"), self.concentration
        return a * self.rate.log() + (a - 1) * x.log() - self.rate * x - self.lgamma_alpha

    def cdf(self, value):
        x = _var(value, "value", "GammaDistribution.cdf")
        p = _gammainc(self.concentration.numpy(), self.rate.numpy() * x.numpy())
        return creation.array(p.astype(x.dtype))

    def mean(self):
        return self.concentration / self.rate

    def mode(self):
        return ((self.concentration - 1) / self.rate).maximum(0)

    def variance(self):
        return self.concentration / (self.rate * self.rate)

    def entropy(self):
        a = self.concentration
        return a - self.rate.log() + self.lgamma_alpha + (1 - a) * a.digamma()


def kl_divergence(cur_dist, old_dist):
    """KL(cur_dist || old_dist) for two distributions of the same kind (PyTorch's formulas).

    >>> jd.kl_divergence(jd.Uniform(0.0, 1.0), jd.Uniform(0.0, 2.0)).item()
    0.6931471824645996
    """
    if type(cur_dist) is not type(old_dist):
        raise TypeError(f"kl_divergence: both distributions must be of one kind, got "
                        f"{type(cur_dist).__name__} and {type(old_dist).__name__}")
    p, q = cur_dist, old_dist
    if isinstance(p, Normal):
        ratio = (p.sigma / q.sigma) ** 2
        return 0.5 * (ratio + ((p.mu - q.mu) / q.sigma) ** 2 - 1 - ratio.log())
    if isinstance(p, Categorical):
        return (p.probs * (p.logits - q.logits)).sum(-1)
    if isinstance(p, Uniform):
        covered = (q.low <= p.low).logical_and(q.high >= p.high)
        return FUNCTIONS["where"](covered, ((q.high - q.low) / (p.high - p.low)).log(), math.inf)
    if isinstance(p, Geometric):
        return -p.entropy() - (1 - q.prob).log() / p.prob - q.logits
    if isinstance(p, GammaDistribution):
        a, b, c, d = p.concentration, p.rate, q.concentration, q.rate
        return c * (b / d).log() + q.lgamma_alpha - p.lgamma_alpha + (a - c) * a.digamma() + (d - b) * (a / b)
    raise NotImplementedError(f"kl_divergence: no formula for {type(p).__name__}")
