"""Reductions: sum/prod/max/min over ``dims`` (``keepdims``), their front ends (mean, all, any),
and argmax/argmin. A reduction ends a fused kernel: its input chain is computed inside the loop."""
from .. import dtypes
from ..flags import flags
from ..var import Var
from .barrier import buffered
from .registry import OpSpec, export, register
from .reindex import normalize_dim


def _reduce_infer(inputs, a):
    x = inputs[0]
    shape = tuple(1 if k in a["dims"] else s for k, s in enumerate(x.shape) if a["keepdims"] or k not in a["dims"])
    if a["op"] in ("add", "mul") and (x.dtype == "bool" or dtypes.is_integer(x.dtype)):
        return shape, _WIDE_SUMS[x.dtype]
    if dtypes.is_float(x.dtype):
        return shape, a.get("dtype") or x.dtype
    return shape, x.dtype


# as numpy: integer sums and products are 64-bit (unsigned stay unsigned), so a uint8 image sums
_WIDE_SUMS = {name: "uint64" if name.startswith("u") else "int64" for name in dtypes.INTEGERS | {"bool"}}


def _kept_shape(x, dims):
    return tuple(1 if k in dims else s for k, s in enumerate(x.shape))


def _reduce_grad(d, out, x, a):
    x = x[0]
    if not dtypes.is_float(x.dtype):
        return [None]
    kept = _kept_shape(x, a["dims"])
    # reduced leading dims come back as broadcasting's new leading dims (a loss's mean over all):
    # the reshape to ``kept`` would be one more node every step
    leading = not a["keepdims"] and tuple(a["dims"]) == tuple(range(len(a["dims"])))
    d_b = (d if leading else d.reshape(kept)).broadcast_to(x.shape)
    if a["op"] == "add":
        return [d_b]
    if a["op"] == "mul":
        return [d_b * _prod_of_others(x, a["dims"], kept)]
    # The winners are those of x as the backward computes it, from one buffer (not ``out``, made
    # by another kernel, whose recomputed x may differ in a last bit and match no element).
    x = buffered(x)
    extreme = Var.node("reduce", [x], op=a["op"], dims=a["dims"], keepdims=True).broadcast_to(x.shape)
    hit = (x == extreme).cast(x.dtype)                    # ties share the gradient equally
    count = hit.sum(dims=a["dims"], keepdims=True).broadcast_to(x.shape)
    return [d_b * hit / count]


def _prod_of_others(x, dims, kept):
    """For each element, the product of the other elements of its reduction group: ``prod / x``
    where ``x`` is nonzero; for a zero, the product of the nonzeros if it is the only zero."""
    from .elementwise import where
    is_zero = x == 0
    nonzero = where(is_zero, 1.0, x)
    prod_nz = nonzero.prod(dims=dims, keepdims=True).broadcast_to(x.shape)
    zeros = is_zero.cast("int32").sum(dims=dims, keepdims=True).broadcast_to(x.shape)
    return where(zeros == 0, prod_nz / x, where(is_zero & (zeros == 1), prod_nz, 0.0))


register(OpSpec("reduce", "reduce", infer=_reduce_infer, grad=_reduce_grad))


def _dims(x, dims, name):
    if dims is None:
        return tuple(range(x.ndim))
    if dtypes.is_int(dims):
        dims = [dims]
    elif not isinstance(dims, (tuple, list)):
        # jt.max(a, b) is a reduction over dims b, as in numpy and Jittor (PyTorch's is elementwise)
        hint = f"; the elementwise {name}imum of two Vars is jt.{name}imum(a, b)" if name in ("max", "min") else ""
        raise TypeError(f"{name}: dims must be an int or a tuple of ints, got {type(dims).__name__}{hint}")
    return tuple(sorted({normalize_dim(d, x.ndim) for d in dims}))


def _front(op, name):
    def reduce(x, dims=None, keepdims=False, *, dim=None, axis=None, keepdim=False):
        if not isinstance(x, Var):                 # jt.sum([1, 2]), as np.sum
            from ..creation import as_var
            x = as_var(x)
        dims = _dims(x, next((v for v in (dims, dim, axis) if v is not None), None), name)
        keepdims = keepdims or keepdim
        if op in ("max", "min") and any(x.shape[d] == 0 for d in dims):
            # as numpy: nothing to take the max of; an empty *batch* (a rank's empty shard) is fine
            raise ValueError(f"{op} over an empty dim of a Var (shape {x.shape}, dims {dims})")
        if not dims:
            return x
        if dtypes.is_float(x.dtype) and (flags.amp_reg or x.dtype == "float16"):
            out_dtype = dtypes.reduce_dtype(op, x.dtype, flags.amp_reg)     # Jittor's, amp_reg bit 4
            if out_dtype != x.dtype:
                return Var.node("reduce", [x], op=op, dims=dims, keepdims=keepdims, dtype=out_dtype)
        return Var.node("reduce", [x], op=op, dims=dims, keepdims=keepdims)
    return reduce


sum_ = export("sum")(_front("add", "sum"))
prod = export("prod")(_front("mul", "prod"))
max_ = export("max")(_front("max", "max"))
min_ = export("min")(_front("min", "min"))


@export("mean")
def mean(x, dims=None, keepdims=False, **kw):
    """Arithmetic mean over ``dims`` (all dims when omitted); ints give float32."""
    if not isinstance(x, Var):
        from ..creation import as_var
        x = as_var(x)
    if not dtypes.is_float(x.dtype):
        x = x.cast(dtypes.DEFAULT_FLOAT)
    if x.dtype == "float16":              # as Jittor: the mean in float32, rounded to half once
        return mean(x.cast("float32"), dims, keepdims, **kw).cast("float16")
    total = sum_(x, dims, keepdims, **kw)
    count = x.numel() // max(total.numel(), 1)      # values behind each mean
    # divided, not multiplied by 1 / count: the mean of a float32 sum is then rounded once, as
    # numpy's and PyTorch's (x * 0.1 put the mean of 1e4 + k / 100, k < 10, an ulp off)
    return total / float(count) if count else total * float("nan")     # the mean of nothing is NaN, as in numpy


@export("all")
def all_(x, dims=None, keepdims=False, **kw):
    """True where no element over ``dims`` is zero (also over an empty dim, as numpy)."""
    return sum_((x == 0).cast("int32"), dims, keepdims, **kw) == 0


@export("any")
def any_(x, dims=None, keepdims=False, **kw):
    """True where some element over ``dims`` is nonzero (never over an empty dim, as numpy)."""
    return sum_((x != 0).cast("int32"), dims, keepdims, **kw) > 0


def _arg_infer(inputs, a):
    x, dim = inputs[0], a["dim"]
    return tuple(1 if k == dim else s for k, s in enumerate(x.shape) if a["keepdims"] or k != dim), "int32"


register(OpSpec("argreduce", "argreduce", infer=_arg_infer, grad=lambda d, out, x, a: [None]))


def _arg_front(op):
    def arg(x, dim=None, keepdims=False, *, axis=None, keepdim=False):
        """Index (int32) of the first extreme along ``dim``, and the extreme values, as Jittor:
        ``pred, value = logits.argmax(dim=1)``. With no dim, the index into the flattened Var."""
        dim = axis if dim is None else dim
        if dim is None:
            x, dim = x.reshape(-1), 0
        dim = normalize_dim(dim, x.ndim)
        if x.shape[dim] == 0:
            raise ValueError(f"arg{op} over an empty dim {dim} of shape {x.shape}")
        keep = keepdims or keepdim
        index = Var.node("argreduce", [x], op=op, dim=dim, keepdims=keep)
        return index, Var.node("reduce", [x], op=op, dims=(dim,), keepdims=keep)
    arg.__name__ = f"arg{op}"
    return arg


argmax = export("argmax")(_arg_front("max"))
argmin = export("argmin")(_arg_front("min"))


@export("arg_reduce")
def arg_reduce(x, op, dim, keepdims):
    """Jittor's ``arg_reduce``: ``op`` "max" or "min" along ``dim``, as (index int32, value);
    ``jt.argmax`` / ``jt.argmin`` with the op named.

    >>> index, value = jt.arg_reduce(jt.array([[1.0, 3.0, 2.0]]), "max", 1, False)
    >>> index.numpy(), value.numpy()
    (array([1], dtype=int32), array([3.], dtype=float32))
    """
    if op not in ("max", "min"):
        raise ValueError(f"arg_reduce: op must be 'max' or 'min', got {op!r}")
    return (argmax if op == "max" else argmin)(x, dim, keepdims)
