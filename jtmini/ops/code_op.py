"""``jt.code``: an op whose kernel body the user writes in C++, as Jittor's code op, for what no
composed op does well (a sort, a scan, a loop with state). The body sees each input and output
as Jittor's code op shows it: ``@in0(i, j)`` / ``@out(i)`` / ``@out1(i)`` read and write elements,
``in0_shape0``, ``in0_stride0``, ``in0_p`` (the pointer) and ``in0_type`` describe a buffer,
``@alias(a, in0)`` names one, and ``data["x"]`` reads a number passed in ``data`` (a kernel
argument: new values compile nothing). ``cpu_grad_src[k]`` is the body computing input k's
gradient, where ``dout`` is the output's gradient and ``pout`` (``pout0, ...``) the outputs.
The body is compiled once per source, dims and dtypes (shapes are arguments) and runs on the
host; inputs are C-contiguous and must not be written; outputs start zeroed. Several outputs
come out of one buffer the body fills (op ``code``), each copied out by a ``code_output`` node;
fetched one at a time, the body runs once per fetch (``jt.sync([a, b])`` runs it once).

    >>> a = jt.array([3.0, 1.0, 2.0])
    >>> jt.code(a.shape, a.dtype, [a], cpu_header="#include <algorithm>",
    ...         cpu_src="for (int i = 0; i < in0_shape0; i++) @out(i) = @in0(i);"
    ...                 "std::sort(&@out(0), &@out(0) + out_shape0);").numpy()
    array([1., 2., 3.], dtype=float32)
"""
import math
import re
from typing import NamedTuple

import numpy as np

from .. import dtypes
from ..state import services
from ..var import Var
from .registry import OpSpec, c_contiguous, export, register

_ALIAS = re.compile(r"@alias\(\s*(\w+)\s*,\s*(\w+)\s*\)")
_BUFFER = re.compile(r"(in|out)\d+")
_WORD = re.compile(r"\w+")
_DATA = re.compile(r"""\bdata\s*\[\s*(?:"(\w+)"|'(\w+)')\s*\]""")
_SUFFIXES = r"(_shape\d+|_stride\d+|_p|_type)"
_ALIGN = 64           # bytes between the outputs packed in one buffer


class _Buffers(NamedTuple):
    """The kernel's buffers, inputs then outputs: names (``in0``, ``out0``), ranks and dtypes."""
    names: tuple
    ndims: tuple
    dtypes: tuple


def _aliases(texts, buffers, who):
    """``{alias: buffer}`` of every ``@alias(a, b)`` in ``texts`` (``out`` is ``out0``), and the
    texts without them."""
    found = {"out": "out0"}
    stripped = [_ALIAS.sub(lambda m: found.__setitem__(m.group(1), m.group(2)) or "", t) for t in texts]
    resolved = {}
    for alias in found:
        target, seen = alias, set()
        while target in found and target not in seen:
            seen.add(target)
            target = found[target]
        if target not in buffers.names:
            raise ValueError(f"{who}: @alias({alias}, {found[alias]}) names no buffer of this op; it has "
                             f"{', '.join(buffers.names)}")
        resolved[alias] = target
    return resolved, stripped


def _rename(text, aliases):
    """``a_shape0``, ``a_stride0``, ``a_p``, ``a_type`` of each alias ``a`` as its buffer's."""
    for alias, target in aliases.items():
        text = re.sub(rf"\b{alias}{_SUFFIXES}\b", lambda m, t=target: t + m.group(1), text)
    return text


def _call_args(text, start, who):
    """The comma-separated arguments of the parenthesis opening at ``start``, and the end."""
    depth, args, at = 0, [], start + 1
    for k in range(start, len(text)):
        c = text[k]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[at:k])
                return [a for a in args if a.strip()] if len(args) == 1 else args, k + 1
        elif c == "," and depth == 1:
            args.append(text[at:k])
            at = k + 1
    raise ValueError(f"{who}: unbalanced parenthesis after {text[max(0, start - 20):start + 20]!r}")


def _element(name, args, buffers, who):
    """``name_p[...]``: the element of buffer ``name`` at indices ``args``."""
    ndim = buffers.ndims[buffers.names.index(name)]
    if ndim == 0 and len(args) <= 1:
        return f"{name}_p[0]"
    if len(args) != ndim:
        raise ValueError(f"{who}: @{name}(...) takes {ndim} indices ({name} has {ndim} dims), got {len(args)}: "
                         f"({', '.join(a.strip() for a in args)})")
    terms = [f"({a.strip()})*{name}_stride{d}" for d, a in enumerate(args[:-1])] + [f"({args[-1].strip()})"]
    return f"{name}_p[{' + '.join(terms)}]"


def _expand(text, aliases, buffers, who):
    """``text`` with its ``@name(i, ...)`` element accesses (nested ones too) in plain C."""
    pieces, at = [], 0
    while (j := text.find("@", at)) >= 0:
        pieces.append(text[at:j])
        word = _WORD.match(text, j + 1)
        if word is None:
            raise ValueError(f"{who}: '@' not followed by a name: {text[j:j + 20]!r}")
        name, at = word.group(0), word.end()
        if name == "PRECALC":          # the CUDA form's stride set-up: always done here
            continue
        target = aliases.get(name, name)
        if name in ("ARGS", "ARGS_DEF") or target not in buffers.names:
            raise ValueError(f"{who}: unknown macro @{name} (the CPU body knows @in<k>(...), @out<k>(...), "
                             f"@out(...), @alias; buffers: {', '.join(buffers.names)})")
        rest = len(text[at:]) - len(text[at:].lstrip())
        if text[at + rest:at + rest + 1] != "(":
            raise ValueError(f"{who}: @{name} needs its indices, as @{name}(i, ...)")
        args, at = _call_args(text, at + rest, who)
        pieces.append(_element(target, [_expand(a, aliases, buffers, who) for a in args], buffers, who))
    pieces.append(text[at:])
    return "".join(pieces)


def _data_refs(text, keys, who):
    """``data["x"]`` as ``jt_data[k]``, ``k`` the key's place in the sorted ``keys``."""
    def ref(m):
        key = m.group(1) or m.group(2)
        if key not in keys:
            raise ValueError(f"{who}: data[{key!r}] is not in data (keys: {sorted(keys)})")
        return f"jt_data[{keys.index(key)}]"
    return _DATA.sub(ref, text)


def _declarations(buffers):
    """Each buffer's pointer, dims and strides, read from the kernel's arguments."""
    lines, at = [], 0
    for k, (name, ndim) in enumerate(zip(buffers.names, buffers.ndims)):
        lines.append(f"  {name}_type* __restrict__ {name}_p = ({name}_type*)jt_bufs[{k}];")
        lines += [f"  const index_t {name}_shape{d} = jt_ip[{at + d}];" for d in range(ndim)]
        stride = "1"
        for d in reversed(range(ndim)):
            lines.append(f"  const index_t {name}_stride{d} = {stride};")
            stride = f"{name}_stride{d} * {name}_shape{d}"
        at += ndim
    return "\n".join(lines)


def _kernel_context(buffers, header, src, keys, who):
    """The ``templates/cpu/code.cc.j2`` context of a body: macros expanded, declarations made."""
    aliases, (header, src) = _aliases([header, src], buffers, who)
    header, src = (_data_refs(_expand(_rename(t, aliases), aliases, buffers, who), keys, who) for t in (header, src))
    typedefs = "\n".join(f"typedef {dtypes.C_TYPES[t]} {n}_type;" for n, t in zip(buffers.names, buffers.dtypes))
    includes = "".join(line.strip() + "\n" for line in header.splitlines() if line.lstrip().startswith("#include"))
    header = "".join(line + "\n" for line in header.splitlines() if not line.lstrip().startswith("#include"))
    return (("declarations", _declarations(buffers)), ("header", header), ("includes", includes), ("src", src),
            ("typedefs", typedefs))


def _packing(outs):
    """Byte offsets of the outputs in one packed buffer, and its size."""
    offsets, at = [], 0
    for shape, dtype in outs:
        offsets.append(at)
        at += -(-math.prod(shape) * np.dtype(dtypes.NUMPY[dtype]).itemsize // _ALIGN) * _ALIGN
    return offsets, max(at, 1)


def infer_outputs(inputs, a):
    """(shape, dtype) of an op of outputs ``a["outs"]``: its one output, or the packed bytes."""
    if len(a["outs"]) == 1:
        return a["outs"][0]
    return (_packing(a["outs"])[1],), "uint8"


def _run(arrays, a, backend):
    if backend.name != "cpu":
        raise RuntimeError("jt.code: the op's cpu_src runs on the CPU backend only (jtmini runs no cuda_src)")
    arrays = [np.ascontiguousarray(x) for x in arrays]
    packed, results = allocate_outputs(a["outs"])
    if a["n_init"]:         # jt.code(inputs, outputs): the outputs start from the given Vars' values
        for result, start in zip(results, arrays[len(arrays) - a["n_init"]:]):
            result[...] = start
        arrays = arrays[:len(arrays) - a["n_init"]]
    ints = [n for x in arrays + results for n in x.shape]
    threads = backend.thread_count()
    backend.kernel("code", **dict(a["context"])).run(arrays + results, ints, list(a["values"]), threads)
    return packed


def allocate_outputs(outs):
    """The zeroed buffer of outputs ``[(shape, dtype)]`` (one output: itself; several: packed
    bytes) and a view of each output in it."""
    if len(outs) == 1:
        out = np.zeros(outs[0][0], dtypes.NUMPY[outs[0][1]])
        return out, [out]
    packed = np.zeros(_packing(outs)[1], np.uint8)
    return packed, _views(packed, outs)


def _views(packed, outs):
    """Each output ``(shape, dtype)`` of ``outs`` as a view of the packed bytes holding them all."""
    return [packed[at:at + math.prod(s) * dtypes.NUMPY[t].itemsize].view(dtypes.NUMPY[t]).reshape(s)
            for at, (s, t) in zip(_packing(outs)[0], outs)]


def _grads(inputs, a, dout, outs, which):
    """Each input's gradient from its ``cpu_grad_src`` body (None where it has none): a code op
    over the inputs, ``dout`` and the outputs (``pout`` the one whose gradient ``dout`` is)."""
    inputs, starts = inputs[:len(inputs) - a["n_init"]], inputs[len(inputs) - a["n_init"]:]
    n = len(inputs)
    alias = "".join([f"@alias(dout, in{n})\n", f"@alias(pout, in{n + 1 + which})\n"] +
                    [f"@alias(pout{j}, in{n + 1 + j})\n" for j in range(len(outs))])
    data = dict(zip(a["keys"], a["values"]))
    return [None if k >= len(a["grad_srcs"]) or not a["grad_srcs"][k] else
            code(x.shape, x.dtype, list(inputs) + [dout] + list(outs), cpu_src=a["grad_srcs"][k],
                 cpu_header=alias + a["raw_header"], data=data)
            for k, x in enumerate(inputs)] + [None] * len(starts)


def grad_rule(grads):
    """The grad rule of an op whose inputs' gradients ``grads(inputs, attrs, dout, outputs, which)``
    gives: for one output, its gradient's; for several, none through the packed buffer (each
    output's ``code_output`` node carries its own)."""
    def rule(dout, out, inputs, a):
        if len(a["outs"]) > 1:
            return [None] * len(inputs)
        return grads(inputs, a, dout, [out], 0)
    return rule


def _planned(inputs, a, backend):
    """``[(template, context)]`` of the body's kernel (``OpSpec.kernels``)."""
    return [("code", dict(a["context"]))]


register(OpSpec("code", "library", infer=infer_outputs, run=_run, grad=grad_rule(_grads), reads_view=c_contiguous, half=True,
                runtime_attrs=("values",), kernels=_planned))


def _output_infer(inputs, a):
    return a["code"]["outs"][a["index"]]


def _output_run(arrays, a, backend):
    """Output ``index`` of a multi-output code op, copied out of its packed buffer."""
    return _views(arrays[0], a["code"]["outs"])[a["index"]].copy()


def _output_grad(dout, out, inputs, a):
    packed, sources, j = inputs[0], inputs[1:], a["index"]
    outs = [out if k == j else Var.node("code_output", inputs, index=k, code=a["code"], of=a["of"])
            for k in range(len(a["code"]["outs"]))]
    return [None] + OUTPUT_GRADS[a["of"]](sources, a["code"], dout, outs, j)


# op -> its rule ``(inputs, attrs, dout, outputs, which) -> [gradient per input]`` for the
# gradients of its output ``which`` (the op's packed node passes none)
OUTPUT_GRADS = {"code": _grads}


register(OpSpec("code_output", "library", infer=_output_infer, run=_output_run, grad=_output_grad, half=True))


class _Attrs(dict):
    """A code op's attrs as one hashable value (graph signatures hash attrs)."""

    def __hash__(self):
        return hash(tuple(sorted(self.items())))


def _outputs(shape, dtype, who):
    """[(shape, dtype)] of the outputs, and whether the caller asked for a list."""
    many = isinstance(shape, (list, tuple)) and len(shape) > 0 and all(
        isinstance(s, (list, tuple)) or hasattr(s, "__len__") and not isinstance(s, (str, int)) for s in shape)
    shapes, types = (list(shape), list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * len(shape)) \
        if many else ([shape], [dtype])
    if len(shapes) != len(types):
        raise ValueError(f"{who}: {len(shapes)} output shapes but {len(types)} dtypes")
    outs = []
    for s, t in zip(shapes, types):
        s = (int(s),) if isinstance(s, (int, np.integer)) else tuple(int(n) for n in s)
        if any(n < 0 for n in s):
            raise ValueError(f"{who}: output shape {s} has a negative dim; jtmini's code op has no "
                             "variable-size outputs: give the size (an upper bound) and return it as a second output")
        outs.append((s, dtypes.canonical(t)))
    return outs, many


def _checked_inputs(inputs, who):
    """The inputs as Vars (numpy arrays are made Vars), each named in an error."""
    out = []
    for k, x in enumerate(inputs):
        if isinstance(x, np.ndarray):
            x = services.array(x)
        if not isinstance(x, Var):
            raise TypeError(f"{who}: inputs[{k}] must be a Var or a numpy array, got {type(x).__name__}")
        out.append(x)
    return out


@export("code", method=False)
def code(shape=None, dtype=None, inputs=(), cpu_src="", cpu_grad_src=(), cpu_header="", cuda_src="",
         cuda_grad_src=(), cuda_header="", data=None, outputs=None):
    """An op computed by the C++ body ``cpu_src`` (Jittor's ``jt.code``; see the module docstring
    for what the body sees). ``shape``, ``dtype``: the output's, or lists of them for several
    outputs (a list of Vars comes back). ``jt.code(inputs, outputs, ...)`` (or ``outputs=``) writes
    the Vars ``outputs`` in place: the body's outputs start from their values and they are assigned
    the results. ``data``: numbers the body reads as ``data["name"]``.

        >>> x = jt.array([1.0, 2.0])
        >>> y = jt.code(x.shape, x.dtype, [x], cpu_src="for (int i=0; i<in0_shape0; i++) @out(i) = @in0(i)*2;",
        ...             cpu_grad_src=["for (int i=0; i<in0_shape0; i++) @out(i) = @dout(i)*2;"])
        >>> y.numpy(), jt.grad(y.sum(), x).numpy()
        (array([2., 4.], dtype=float32), array([2., 2.], dtype=float32))
    """
    who = "jt.code"
    if outputs is None and _all_vars(dtype) and dtype and _all_vars(shape):
        inputs, outputs = shape, dtype          # Jittor's jt.code(inputs, outputs, ...)
    if outputs is not None:
        shape, dtype = [tuple(o.shape) for o in outputs], [o.dtype for o in outputs]
    if shape is None or dtype is None and not inputs:
        raise ValueError(f"{who}: give the output's shape and dtype (or outputs=[vars])")
    inputs = _checked_inputs(inputs if isinstance(inputs, (list, tuple)) else [inputs], who)
    outs, many = _outputs(shape, dtype if dtype is not None else inputs[0].dtype, who)
    if not cpu_src.strip():
        raise ValueError(f"{who}: cpu_src is empty" + (" (jtmini runs no cuda_src: give a cpu_src too)" if cuda_src else ""))
    data = dict(data or {})
    for key, value in data.items():
        if not isinstance(key, str) or not key.isidentifier() or not isinstance(value, (int, float, np.number)):
            raise TypeError(f"{who}: data maps names to numbers, got {key!r}: {type(value).__name__}")
    keys = tuple(sorted(data))
    buffers = _Buffers(tuple(f"in{k}" for k in range(len(inputs))) + tuple(f"out{k}" for k in range(len(outs))),
                       tuple(x.ndim for x in inputs) + tuple(len(s) for s, _ in outs),
                       tuple(str(x.dtype) for x in inputs) + tuple(t for _, t in outs))
    attrs = dict(outs=tuple(outs), keys=keys, values=tuple(float(data[k]) for k in keys),
                 context=_kernel_context(buffers, cpu_header, cpu_src, keys, who), raw_header=cpu_header,
                 grad_srcs=tuple(cpu_grad_src), n_init=0 if outputs is None else len(outputs))
    sources = inputs + ([] if outputs is None else _checked_inputs(outputs, who))
    node = Var.node("code", sources, **attrs)
    results = [node] if not many else \
        split_outputs(node, sources, attrs, "code")
    if outputs is None:
        return results if many else node
    for given, result in zip(outputs, results):     # Jittor's outputs are written in place
        given.assign(result)
    return list(outputs)


def split_outputs(node, sources, attrs, of):
    """The outputs of an op of several (``of``: "code", "numpy_code") packed in ``node``."""
    return [Var.node("code_output", [node] + sources, index=k, code=_Attrs(attrs), of=of)
            for k in range(len(attrs["outs"]))]


def _all_vars(xs):
    return isinstance(xs, (list, tuple)) and all(isinstance(x, Var) for x in xs)
