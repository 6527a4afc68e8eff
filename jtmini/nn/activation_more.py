"""PyTorch's other activations, and a few of its distance and loss layers, for code ported from
PyTorch (Jittor has none of these): each a composition of jtmini's elementwise ops, so it fuses;
their gradients at the kinks are PyTorch's (tested on the kinks themselves).

    >>> nn.hardswish(jt.array([-4.0, 0.0, 1.0, 4.0])).numpy()
    array([-0.       ,  0.       ,  0.6666667,  4.       ], dtype=float32)
    >>> nn.GLU()(jt.randn(2, 6)).shape
    (2, 3)
"""
from ..ops.compat import log_sigmoid
from ..ops.elementwise import where
from ..var import Var
from . import functional as F
from .activation import _float_input, _log1p, elu, relu6
from .arguments import real
from .module import Module

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def hardsigmoid(x):
    """relu6(x + 3) / 6; the gradient is 1/6 strictly between -3 and 3 (PyTorch's).

    >>> nn.hardsigmoid(jt.array([-3.0, 0.0, 3.0])).numpy()
    array([0. , 0.5, 1. ], dtype=float32)
    """
    return relu6(_float_input(x, "hardsigmoid") + 3) * (1 / 6)


def hardswish(x):
    """x * relu6(x + 3) / 6 (MobileNetV3's); the gradient is 0 up to -3, (2x + 3) / 6 below 3 and
    1 from 3 on, as PyTorch's."""
    x = _float_input(x, "hardswish")
    return x * hardsigmoid(x)


def softsign(x):
    """x / (1 + |x|)."""
    x = _float_input(x, "softsign")
    return x / (x.abs() + 1)


def tanhshrink(x):
    """x - tanh(x)."""
    x = _float_input(x, "tanhshrink")
    return x - x.tanh()


def selu(x):
    """scale * elu(x, alpha) with the self-normalising constants (Klambauer et al.)."""
    return elu(_float_input(x, "selu"), _SELU_ALPHA) * _SELU_SCALE


def celu(x, alpha=1.0):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    alpha = real("celu", "alpha", alpha)
    if alpha == 0:
        raise ValueError("celu: alpha must be nonzero, got 0")
    return elu(_float_input(x, "celu") * (1 / alpha)) * alpha


def glu(x, dim=-1):
    """a * sigmoid(b), a and b the halves of ``x`` along ``dim`` (whose size must be even)."""
    x = _float_input(x, "glu")
    if not x.ndim or x.shape[dim] % 2:
        raise ValueError(f"glu: dim {dim} of shape {x.shape} must have an even size")
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


def softshrink(x, lambd=0.5):
    """x - lambd above lambd, x + lambd below -lambd, 0 between."""
    x, lambd = _float_input(x, "softshrink"), _non_negative("softshrink", lambd)
    return where(x > lambd, x - lambd, where(x < -lambd, x + lambd, 0.0))


def hardshrink(x, lambd=0.5):
    """x where |x| > lambd, else 0."""
    x, lambd = _float_input(x, "hardshrink"), _non_negative("hardshrink", lambd)
    return where((x > lambd) | (x < -lambd), x, 0.0)


def threshold(x, threshold, value):
    """x where x > threshold, else ``value`` (PyTorch's ``F.threshold``)."""
    x = _float_input(x, "threshold")
    return where(x > real("threshold", "threshold", threshold), x, real("threshold", "value", value))


def softmin(x, dim=1):
    """softmax(-x) along ``dim``."""
    return F.softmax(-_float_input(x, "softmin"), dim)


def _non_negative(who, lambd):
    lambd = real(who, "lambd", lambd)
    if lambd < 0:
        raise ValueError(f"{who}: lambd must be >= 0, got {lambd}")
    return lambd


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 * x2) / max(|x1| |x2|, eps) along ``dim`` (PyTorch's, inputs broadcast).

    >>> nn.cosine_similarity(jt.array([[1.0, 0.0]]), jt.array([[1.0, 1.0]])).numpy()
    array([0.70710677], dtype=float32)
    """
    x1, x2 = _float_input(x1, "cosine_similarity"), _float_input(x2, "cosine_similarity")
    norms = ((x1 * x1).sum(dim) * (x2 * x2).sum(dim)).sqrt()
    return (x1 * x2).sum(dim) / norms.maximum(eps)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """The p-norm of ``x1 - x2 + eps`` over the last dim (PyTorch's)."""
    x1, x2 = _float_input(x1, "pairwise_distance"), _float_input(x2, "pairwise_distance")
    p = real("pairwise_distance", "p", p)
    if p <= 0:
        raise ValueError(f"pairwise_distance: p must be > 0, got {p}")
    diff = (x1 - x2 + eps).abs()
    return (diff ** p).sum(-1, keepdims=keepdim) ** (1 / p)


def huber_loss(output, target, reduction="mean", delta=1.0):
    """0.5 d^2 where d = |output - target| < delta, else delta (d - 0.5 delta): delta times
    ``smooth_l1_loss`` with ``beta=delta`` (PyTorch's ``HuberLoss``)."""
    delta = real("huber_loss", "delta", delta)
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be > 0, got {delta}")
    return F.smooth_l1_loss(output, target, reduction, delta) * delta


def soft_margin_loss(output, target, reduction="mean"):
    """log(1 + exp(-target * output)), targets +-1 (PyTorch's ``SoftMarginLoss``)."""
    output, target = F._loss_operands(output, target, "soft_margin_loss")
    z = -(target * output)
    per = z.maximum(0.0) + _log1p((-(z.abs())).exp())        # log(1 + e^z) without overflow
    return F._reduce(per, F._check_reduction(reduction, "soft_margin_loss"))


def unflatten(x, dim, sizes):
    """``x`` with dim ``dim`` split into ``sizes`` (one may be -1), PyTorch's ``unflatten``.

    >>> nn.unflatten(jt.ones(2, 12), 1, (3, 4)).shape
    (2, 3, 4)
    """
    if not isinstance(x, Var):
        raise TypeError(f"unflatten: input must be a jtmini Var, got {type(x).__name__}")
    if not -x.ndim <= dim < x.ndim:
        raise ValueError(f"unflatten: dim {dim} is out of range for shape {x.shape}")
    dim %= x.ndim
    return x.reshape(tuple(x.shape[:dim]) + tuple(sizes) + tuple(x.shape[dim + 1:]))


def _layer(name, fn, doc, ignored=(), **defaults):
    """A Module class named ``name`` whose ``execute(*inputs)`` is ``fn(*inputs, **its arguments)``;
    ``ignored`` arguments (PyTorch's ``inplace``) are accepted and kept, not passed."""
    names = list(defaults) + list(ignored)

    def __init__(self, *args, **kwargs):
        if len(args) > len(names):
            raise TypeError(f"{name}() takes at most {len(names)} arguments, got {len(args)}")
        unknown = set(kwargs) - set(names)
        if unknown:
            raise TypeError(f"{name}() got unexpected arguments {sorted(unknown)}")
        given = {**defaults, **{k: False for k in ignored}, **dict(zip(names, args)), **kwargs}
        for key, value in given.items():
            setattr(self, key, value)

    def execute(self, *inputs):
        return fn(*inputs, **{k: getattr(self, k) for k in defaults})
    return type(name, (Module,), {"__init__": __init__, "execute": execute, "__doc__": doc, "__module__": __name__})


Hardsigmoid = _layer("Hardsigmoid", hardsigmoid, "Layer form of ``hardsigmoid``.", ignored=("inplace",))
Hardswish = _layer("Hardswish", hardswish, "Layer form of ``hardswish``.", ignored=("inplace",))
Softsign = _layer("Softsign", softsign, "Layer form of ``softsign``.")
Tanhshrink = _layer("Tanhshrink", tanhshrink, "Layer form of ``tanhshrink``.")
SELU = _layer("SELU", selu, "Layer form of ``selu``.", ignored=("inplace",))
CELU = _layer("CELU", celu, "Layer form of ``celu``.", ignored=("inplace",), alpha=1.0)
GLU = _layer("GLU", glu, "Layer form of ``glu``.", dim=-1)
Softshrink = _layer("Softshrink", softshrink, "Layer form of ``softshrink``.", lambd=0.5)
Hardshrink = _layer("Hardshrink", hardshrink, "Layer form of ``hardshrink``.", lambd=0.5)
Threshold = _layer("Threshold", threshold, "Layer form of ``threshold``.", ignored=("inplace",),
                      threshold=0.0, value=0.0)
LogSigmoid = _layer("LogSigmoid", log_sigmoid, "Layer form of ``log_sigmoid``.")
Softmin = _layer("Softmin", softmin, "Layer form of ``softmin``.", dim=1)
CosineSimilarity = _layer("CosineSimilarity", cosine_similarity, "Layer form of ``cosine_similarity``.",
                          dim=1, eps=1e-8)
PairwiseDistance = _layer("PairwiseDistance", pairwise_distance, "Layer form of ``pairwise_distance``.",
                          p=2.0, eps=1e-6, keepdim=False)
HuberLoss = _layer("HuberLoss", huber_loss, "Layer form of ``huber_loss``.", reduction="mean", delta=1.0)
SoftMarginLoss = _layer("SoftMarginLoss", soft_margin_loss, "Layer form of ``soft_margin_loss``.", reduction="mean")
Unflatten = _layer("Unflatten", unflatten, "Layer form of ``unflatten``: ``nn.Unflatten(1, (3, 4))``.", dim=1,
                   sizes=())
