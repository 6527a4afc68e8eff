"""The op registry: every op is one ``OpSpec`` (data), and the user-facing functions that build
nodes of it are exported from the same module that declares it.

Kinds and what the pipeline does with them:

==============  ============================================================================
elementwise     same-shape inputs, one C expression (``c_expr``); fused into any kernel
const           a value known on the host (a kernel argument, never baked into the source)
reindex         output element ``i`` reads input element ``index(i)`` (movement ops, views,
                padding, Jittor's ``reindex``); fused by substituting index expressions
reduce          reduction over ``dims``; ends a kernel whose input chain is fused into it
argreduce       index of the max/min over one dim; ends a kernel like reduce
scatter         ``reindex_reduce``: input element ``i`` is accumulated into output ``index(i)``
library         computed by a library call on whole buffers (BLAS matmul)
collective      MPI collectives (never fused, issued in program order)
==============  ============================================================================
"""
import dataclasses
import functools
import inspect
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

import numpy as np

from ..flags import flags
from ..state import services
from ..symbolic import as_expr, sym

KINDS = ("elementwise", "const", "reindex", "reduce", "argreduce", "scatter", "library", "collective")


@dataclass(frozen=True)
class OpSpec:
    """One op, declared once.

    ``infer(inputs, attrs) -> (shape, dtype)`` validates and infers; ``grad(dout, out, inputs,
    attrs) -> [Var | None per input]`` is the backward rule written with other ops.
    ``c_expr`` (elementwise) is a format string over ``{0} {1} {2}`` (operands) and ``{T}`` (the C
    type of the output), or a function ``(in_dtypes, out_dtype, attrs) -> str`` returning one.
    ``index(attrs, in_ndim, out_ndim) -> IndexMap`` (reindex, scatter) maps output indices to input
    indices. ``run(arrays, attrs, backend) -> array`` computes a library op (its hand-written
    kernels and library calls go through ``backend``, a ``runtime.base.Backend``). ``view``: the op is a view of
    its input (its numpy view and strides are derived from its index map by ``numpy_views``), so
    it can feed a library op or a copy without a kernel of its own.
    ``reads_view(shape, strides) -> bool`` (library) says whether the op reads an input view with
    these element strides as it is; the scheduler has a kernel gather any other view first.
    ``runtime_attrs`` are attrs passed to the kernel as arguments rather than compiled in.
    ``runtime_ints(attrs) -> ints`` (reindex) are the integer kernel arguments of a node (slice
    starts, pad widths), named ``arg0, arg1, ...`` (``arg``) in its index map, which then must not
    read the runtime attrs they come from: nodes that differ only in them share one compiled
    kernel. ``int_ranges(attrs, in_dims, out_dims) -> ((lo, hi) | None, ...)`` gives each
    argument's inclusive range from the compiled-in attrs and the dims (None for a dim not
    compiled in), so codegen still proves indices in range; its length is the argument count.
    ``half`` (library, collective): the op takes float16 inputs; the others refuse them with a
    TypeError when the node is built (their hand-written kernels and libraries have no half path).
    ``stateful`` (library): the op's values come from process state it advances (random numbers),
    so computing it twice gives different values: the executor keeps its value once computed and
    makes it a leaf, even where it was only an intermediate.
    ``kernels(inputs, attrs, backend) -> [(template, context), ...]`` (library): the hand-written
    kernels ``run`` will ask ``backend`` for, from the input Vars' shapes and dtypes; the CPU runtime starts
    compiling them when it plans the op, beside the plan's generated kernels, rather than when it runs.
    ``table_kernel(arrays, attrs, backend) -> TableKernel | None`` (library): the one hand-written
    kernel call ``run`` makes on these C-contiguous input arrays (its output a new C-contiguous
    array of the inferred shape), so a CPU launch table can make that call itself instead of
    returning to Python for it (``runtime/cpu_table.py``).
    ``buffered_input(v) -> bool`` (reindex): node ``v`` is computed fastest from its input as a
    buffer (a hand-written kernel reads whole rows of one), so the scheduler does not inline a
    movement of a buffer (a transpose, a pad) into it, as it does for other reindexes.
    """
    name: str
    kind: str
    infer: Callable
    grad: Optional[Callable] = None
    c_expr: object = None
    index: Optional[Callable] = None
    run: Optional[Callable] = None
    view: bool = False
    reads_view: Optional[Callable] = None
    runtime_attrs: tuple = ()
    runtime_ints: Optional[Callable] = None
    int_ranges: Optional[Callable] = None
    half: bool = False
    stateful: bool = False
    kernels: Optional[Callable] = None
    table_kernel: Optional[Callable] = None
    buffered_input: Optional[Callable] = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"op {self.name}: unknown kind {self.kind!r}")
        if (self.runtime_ints is None) != (self.int_ranges is None):
            raise ValueError(f"op {self.name}: runtime_ints and int_ranges go together")


class TableKernel(NamedTuple):
    """A library op's one kernel call (``OpSpec.table_kernel``): the backend's hand-written
    ``kernel`` (its ``fn``), its int and float arguments; ``size``: its thread count is the one
    ``run_fastest`` chose at that size, else (None) ``threads`` (None: one); ``order``: which
    input each of its buffers before the output is (None: the inputs in order); ``hit_floats``:
    for floats made from runtime attrs, ``attrs -> floats``, called again on every hit."""
    kernel: object
    ints: list
    floats: list
    size: Optional[int] = None
    threads: Optional[int] = None
    order: Optional[tuple] = None
    hit_floats: Optional[Callable] = None

    def fixed_threads(self):
        """The thread count of a call with no ``size``: ``threads``, None meaning one."""
        return self.threads or 1

    def launch(self, arrays):
        """Make the call on ``arrays`` (the inputs in ``order``, then the output), as ``run`` does."""
        if self.size is not None:
            self.kernel.run_fastest(arrays, self.ints, self.floats, self.size)
        else:
            self.kernel.run(arrays, self.ints, self.floats, self.fixed_threads())


def kernel_run(call, output):
    """The ``run`` of a library op that is one hand-written kernel call: ``call(arrays, attrs,
    backend) -> TableKernel`` on its C-contiguous inputs (also its ``OpSpec.table_kernel``),
    ``output(arrays, attrs) -> (shape, dtype)`` of the array it writes."""
    def launch(arrays, a, backend):
        arrays = [np.ascontiguousarray(x) for x in arrays]
        return call(arrays, a, backend), arrays
    return launched_run(launch, output)


def launched_run(launch, output):
    """The ``run`` of a library op that is one kernel call made by ``launch(arrays, attrs,
    backend) -> (call, the arrays the call reads, one per input)``; ``output(those arrays,
    attrs) -> (shape, dtype)`` of the array it writes. ``table_kernel_from(launch)`` is the same
    call in a launch table."""
    def run(arrays, a, backend):
        call, laid = launch(arrays, a, backend)
        out = np.empty(*output(laid, a))
        call.launch([laid[k] for k in call.order or range(len(laid))] + [out])
        return out
    return run


def table_kernel_from(launch):
    """A library op's ``table_kernel`` from its ``launch(arrays, attrs, backend) -> (call, the
    arrays the call reads)``, which its ``run`` makes too: the call where it reads the given
    buffers as they are, else None (a launch table holds their addresses; a copy made to lay one
    out would be one hit's only)."""
    def table_kernel(arrays, a, backend):
        call, laid = launch(arrays, a, backend)
        same = all(x.__array_interface__["data"][0] == y.__array_interface__["data"][0] for x, y in zip(laid, arrays))
        return call if same else None
    return table_kernel


def arg(k):
    """The symbol of a node's ``k``-th runtime integer argument in its index map (see OpSpec)."""
    return sym(f"arg{k}")


def runtime_ints(op, attrs):
    """The runtime integer arguments of a node of ``op`` with ``attrs`` (empty for most ops)."""
    spec = OPS[op]
    return () if spec.runtime_ints is None else tuple(int(v) for v in spec.runtime_ints(attrs))


@dataclass(frozen=True)
class IndexMap:
    """One index ``symbolic.Expr`` per input dim (ints are taken as constants) over ``i0, i1,
    ...`` (output indices), ``xshape0, ...`` (input dims) and ``yshape0, ...`` (output dims).
    ``checked``: out-of-range input indices read ``overflow_value`` (Jittor's semantics) instead of
    being trusted to be in range; ``conditions`` are Exprs under which the read also yields
    ``overflow_value``."""
    exprs: tuple
    checked: bool = False
    overflow_value: float = 0
    conditions: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "exprs", tuple(map(as_expr, self.exprs)))
        object.__setattr__(self, "conditions", tuple(map(as_expr, self.conditions)))


OPS = {}          # op name -> OpSpec
FUNCTIONS = {}    # name -> callable, exported as jt.<name>
METHODS = {}      # name -> callable, installed as Var.<name>


def register(spec):
    if spec.name in OPS:
        raise ValueError(f"op {spec.name!r} registered twice")
    if spec.kind in ("library", "collective") and not spec.half:
        spec = dataclasses.replace(spec, infer=_refusing_half(spec.name, spec.infer))
    OPS[spec.name] = spec
    return spec


def _refusing_half(name, infer):
    """``infer`` preceded by a TypeError naming op ``name`` when an input is float16."""
    def checked(inputs, attrs):
        for x in inputs:
            if x.dtype == "float16":
                raise TypeError(f"{name}: float16 inputs are not supported (input of shape {tuple(x.shape)}); "
                                f"cast to float32 first (x.float32())")
        return infer(inputs, attrs)
    return checked


def export(*names, method=True, function=True):
    """Decorator: publish a front-end function as ``jt.<name>`` and/or ``Var.<name>``. A function
    that is also a method takes a Var first; as ``jt.<name>`` it also takes a numpy array there,
    as Jittor's do (``jt.transpose(ndarray, (1, 0))``)."""
    def decorate(fn):
        public = _taking_arrays(fn, (names or (fn.__name__,))[0]) if method and function else fn
        for name in names or (fn.__name__,):
            if function:
                FUNCTIONS[name] = public
            if method:
                METHODS[name] = fn
        return fn
    return decorate


def keyword_aliases(**aliases):
    """Decorator: let callers name arguments as another library does, ``alias=name`` each
    (Jittor's ``jt.full(shape, val=1)`` for ``value``, PyTorch's ``split_size_or_sections``).

        >>> @keyword_aliases(val="value")
        ... def full(shape, value): ...
    """
    def decorate(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            for alias in aliases.keys() & kwargs.keys():
                name = aliases[alias]
                if name in kwargs:
                    raise TypeError(f"{fn.__name__}() got both {alias}= and {name}=, which name one argument")
                kwargs[name] = kwargs.pop(alias)
            return fn(*args, **kwargs)
        call.keyword_aliases = dict(aliases)        # read by tools/jittor_signatures.py
        return call
    return decorate


# What a Var-taking function may be handed first by mistake: plain Python and numpy scalars.
_NOT_VARS = (bool, int, float, complex, str, bytes, list, tuple, dict, set, slice, type(None), type(Ellipsis), np.generic)


def _first_by_keyword(fn, kwargs):
    """The first argument of ``fn`` given by keyword, taken out of ``kwargs``: by its own name, one
    of its ``keyword_aliases``, or Jittor's ``input`` (``jt.sort(input=x)``); TypeError if none."""
    first = next(iter(inspect.signature(fn).parameters))
    names = [first, *(a for a, n in getattr(fn, "keyword_aliases", {}).items() if n == first), "input"]
    for key in names:
        if key in kwargs:
            return kwargs.pop(key)
    raise TypeError(f"{fn.__name__}() missing its first argument {first!r}")


def _taking_arrays(fn, name):
    """``fn`` with a numpy array as its first argument made a Var first (``jt.array``). A plain
    Python value there, which ``fn`` fails on by reaching for a Var's attribute, is a TypeError
    naming ``jt.<name>`` and what it got instead of an AttributeError from deep inside. The first
    argument may come by keyword too (its name, an alias, Jittor's ``input``)."""
    @functools.wraps(fn)
    def public(*args, **kwargs):
        x, args = (args[0], args[1:]) if args else (_first_by_keyword(fn, kwargs), ())
        if isinstance(x, np.ndarray):
            x = services.array(x)
        try:
            return fn(x, *args, **kwargs)
        except AttributeError as error:
            if not isinstance(x, _NOT_VARS):
                raise
            shown = repr(x)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise TypeError(f"jt.{name}: the first argument must be a Var (or a numpy array), got "
                            f"{type(x).__name__} {shown}; make one with jt.array(...)") from error
    return public


def runs_fused():
    """Whether the CPU runs the steps: elsewhere the library kernels would be staged to the host."""
    return (flags.backend or ("cuda" if flags.use_cuda else "cpu")) == "cpu"


def c_contiguous(shape, strides):
    """Whether a view of ``shape`` with element ``strides`` is laid out C-contiguous (dims of size
    1 may have any stride): the ``OpSpec.reads_view`` of library kernels that read flat buffers."""
    step = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size > 1 and stride != step:
            return False
        step *= size
    return True
