"""LayerNorm's per-row work as two hand-written kernels (``templates/cpu/layer_norm.cc.j2``), plus
``per_row``, the read that spreads a row of their (rows, R) tables over an (R, D) tensor inside
generated kernels. ``nn.layer_norm`` and ``nn.group_norm`` standardize with them.

For ``x`` of shape (R, D), normalised along D:

- ``layer_norm_stats(x, eps)`` -> (2, R): each row's mean and ``rstd = 1 / sqrt(var + eps)``;
- ``layer_norm_grad_sums(g, x, table)`` -> (2, R): each row's ``mean(g)`` and ``mean(g * xhat)``;
- ``standardize_rows(x, eps)`` -> ``xhat = (x - mean) * rstd``, a generated map reading the
  table, with the closed-form gradient ``rstd * (g - mean(g) - xhat * mean(g * xhat))``, also a
  generated map, so a following scale, shift or activation fuses into both.

Composed from reductions, a LayerNorm was ~20 graph nodes forward and backward and four reduction
kernels; here it is 9 nodes and two library calls. Each op's gradient is written with other ops,
so the layer can be differentiated twice. The GPU runtime runs the two kernels on the host.

    >>> standardize_rows(jt.randn(4, 8), 1e-5).mean(dims=1).numpy().round(6)
    array([0., 0., 0., 0.], dtype=float32)
"""
import math
import weakref

from .. import dtypes
from ..state import register_cache
from ..autograd import custom_grad
from ..symbolic import sym
from ..var import Var
from .registry import IndexMap, OpSpec, TableKernel, kernel_run, register
from .reindex import stack

_kernels = {}        # (backend, mode, dtype) -> HandKernel
register_cache("layer_norm kernels", _kernels.clear, "one entry per backend, mode, dtype met")


def _kernel(backend, mode, dtype):
    """The kernel of ``templates/<dialect>/layer_norm``; both modes are built on the first call."""
    fn = _kernels.get((backend.name, mode, dtype))
    if fn is None:
        modes = ("stats", "grad_sums")
        built = backend.kernels("layer_norm", [context for _, context in _planned(dtype)])
        for m, k in zip(modes, built):
            _kernels.setdefault((backend.name, m, dtype), k)
        fn = _kernels[(backend.name, mode, dtype)]
    return fn


def _planned(dtype):
    """``[(template, context)]`` of the two kernels ``_kernel`` builds together (``OpSpec.kernels``)."""
    return [("layer_norm", dict(mode=m, ctype=dtypes.C_TYPES[dtype])) for m in ("stats", "grad_sums")]


def _rows_input(who, x):
    if x.ndim != 2 or not dtypes.is_float(x.dtype):
        raise ValueError(f"{who}: x must be a 2-D float32 or float64 Var (rows, values), got {x.shape} {x.dtype}")


# --- per_row: row ``row`` of a (rows, R) table, read at every element of row r of an (R, D) tensor ---
# (or of a tensor whose first ``lead`` dims number the R rows in C order: LayerNorm then needs no
# reshape between its standardization and the scale and shift that follow, which merge into it)
def _per_row_infer(inputs, a):
    table, shape, lead = inputs[0], a["shape"], a.get("lead", 1)
    if table.ndim != 2 or not 1 <= lead < len(shape) or math.prod(shape[:lead]) != table.shape[1] \
            or not 0 <= a["row"] < table.shape[0]:
        raise ValueError(f"per_row: cannot spread row {a['row']} of a {table.shape} table over {shape} "
                         f"({lead} leading dims as its rows)")
    return shape, table.dtype


def _per_row_grad(d, out, inputs, a):
    table, lead = inputs[0], a.get("lead", 1)
    return [Var.node("pad", [d.sum(dims=tuple(range(lead, d.ndim))).reshape(1, table.shape[1])],
                     pads=((a["row"], table.shape[0] - 1 - a["row"]), (0, 0)), value=0)]


def _per_row_index(a, nin, nout):
    """(row, the flat row number of the first ``lead`` output indices)."""
    flat = sym("i0")
    for k in range(1, a.get("lead", 1)):
        flat = flat * sym(f"yshape{k}") + sym(f"i{k}")
    return IndexMap((a["row"], flat))


register(OpSpec("per_row", "reindex", infer=_per_row_infer, grad=_per_row_grad, index=_per_row_index, view=True))


def per_row(table, row, shape, lead=1):
    """``out[r, j] = table[row, r]``: a per-row coefficient read inside the kernel that uses it;
    with ``lead`` > 1, r is the flat index of ``out``'s first ``lead`` dims."""
    if lead == 1:           # the 2-D form's attrs, so its plans and recipes stay as they were
        return Var.node("per_row", [table], row=int(row), shape=tuple(shape))
    return Var.node("per_row", [table], row=int(row), shape=tuple(shape), lead=int(lead))


# --- layer_norm_stats -------------------------------------------------------------------------
def _stats_infer(inputs, a):
    _rows_input("layer_norm_stats", inputs[0])
    return (2, inputs[0].shape[0]), inputs[0].dtype


def _stats_call(arrays, a, backend):
    x = arrays[0]
    return TableKernel(_kernel(backend, "stats", dtypes.numpy_name(x.dtype)), list(x.shape), [a["eps"]], size=x.size)


def _rows_table(x_at):
    """``kernel_run``'s output of both ops: (2, R) for their (R, D) x, input ``x_at``."""
    return lambda arrays, a: ((2, arrays[x_at].shape[0]), arrays[x_at].dtype)


def _stats_grad(d, out, inputs, a):
    """mean = sum(x) / D, rstd = (sum((x - mean)^2) / D + eps)^-1/2: d_x = d_mean / D
    - d_rstd * rstd^3 (x - mean) / D (the mean's own term through the variance sums to zero)."""
    (x,) = inputs
    n = max(x.shape[1], 1)
    mean, rstd = per_row(out, 0, x.shape), per_row(out, 1, x.shape)
    return [per_row(d, 0, x.shape) / n - per_row(d, 1, x.shape) * rstd * rstd * rstd * (x - mean) / n]


register(OpSpec("layer_norm_stats", "library", infer=_stats_infer, run=kernel_run(_stats_call, _rows_table(0)),
                grad=_stats_grad, table_kernel=_stats_call,
                kernels=lambda inputs, a, backend: _planned(inputs[0].dtype)))


def layer_norm_stats(x, eps):
    """(2, R): the mean and ``1 / sqrt(var + eps)`` of each row of the (R, D) ``x``."""
    return Var.node("layer_norm_stats", [x], eps=float(eps))


# --- layer_norm_grad_sums ---------------------------------------------------------------------
def _grad_sums_infer(inputs, a):
    g, x, table = inputs
    _rows_input("layer_norm_grad_sums", x)
    if g.shape != x.shape or g.dtype != x.dtype or table.shape != (2, x.shape[0]) or table.dtype != x.dtype:
        raise ValueError(f"layer_norm_grad_sums: g and x must be ({x.shape[0]}, D) of one dtype and the table "
                         f"(2, {x.shape[0]}), got {g.shape} {g.dtype}, {x.shape} {x.dtype}, {table.shape} {table.dtype}")
    return (2, x.shape[0]), x.dtype


def _grad_sums_call(arrays, a, backend):
    x = arrays[1]
    return TableKernel(_kernel(backend, "grad_sums", dtypes.numpy_name(x.dtype)), list(x.shape), [], size=x.size)


def _grad_sums_grad(c, out, inputs, a):
    """out0 = mean(g), out1 = mean(g * (x - mean) * rstd), D values a row."""
    g, x, table = inputs
    n = max(x.shape[1], 1)
    mean, rstd = per_row(table, 0, x.shape), per_row(table, 1, x.shape)
    c0, c1 = per_row(c, 0, x.shape), per_row(c, 1, x.shape)
    d_g = (c0 + c1 * (x - mean) * rstd) / n
    d_x = c1 * g * rstd / n
    c1_row, rstd_row = c[1], table[1]
    d_table = stack([-c1_row * rstd_row * out[0], c1_row * out[1] / rstd_row])
    return [d_g, d_x, d_table]


register(OpSpec("layer_norm_grad_sums", "library", infer=_grad_sums_infer, grad=_grad_sums_grad,
                run=kernel_run(_grad_sums_call, _rows_table(1)),
                table_kernel=_grad_sums_call))


def layer_norm_grad_sums(g, x, table):
    """(2, R): each row's ``mean(g)`` and ``mean(g * xhat)``, with the mean and rstd of ``table``."""
    return Var.node("layer_norm_grad_sums", [g, x, table])


def standardize_rows(x, eps, lead=1):
    """``(x - mean) / sqrt(var + eps)`` of each row of the float ``x``, with the closed-form
    gradient (see the module doc). Rows are those of the (R, D) ``x``, or, with ``lead`` > 1, the
    elements of its first ``lead`` dims (``x`` keeps its shape: a following elementwise op reads
    the result at its own index, so it merges into the kernel that computes it).

    >>> standardize_rows(jt.randn(2, 3, 8), 1e-5, lead=2).shape
    (2, 3, 8)
    """
    rows, values = math.prod(x.shape[:lead]), math.prod(x.shape[lead:])
    flat = x if lead == 1 and x.ndim == 2 else x.reshape(rows, values)
    table = layer_norm_stats(flat, eps)
    rstd = per_row(table, 1, x.shape, lead)
    xhat = (x - per_row(table, 0, x.shape, lead)) * rstd
    # The rule reads xhat through a weak reference: a strong one would be a cycle (xhat -> its
    # rule -> xhat) that outlives the step, and an unconsumed live xhat is a pending root, so
    # the next optimizer step computed the last step's forward again up to this LayerNorm.
    xhat_ref = weakref.ref(xhat)

    def rule(g):
        g_flat = g.cast(x.dtype)
        sums = layer_norm_grad_sums(g_flat if flat is x else g_flat.reshape(rows, values), flat, table)
        return [(g - per_row(sums, 0, x.shape, lead) - xhat_ref() * per_row(sums, 1, x.shape, lead)) * rstd]
    return custom_grad(xhat, [x], rule, key=("standardize_rows", lead), saved=[flat, table, rstd])
