"""What the CUDA templates (``templates/cuda``) need on top of the dialect-neutral context that
``codegen._Builder`` computes for both dialects:

- loop indices recovered from a flat thread index, where C++ nests ``for`` loops (``unflatten``);
- the sizes of the by-value argument struct (``JtArgs``: dims and constants);
- statements whose GPU form differs: atomic scatter updates, and the merge of argmax/argmin
  partial results across the threads of a block (the C++ kernel never splits an argreduce).

Launch geometry must agree with these templates; ``runtime/cuda.py`` reads ``BLOCK`` from here.
"""
from . import dtypes

BLOCK = 256     # threads per block, for every CUDA kernel; reduce kernels size shared memory by it


def context(kind, root, base, n_ip, n_fp):
    """Extra template variables for a kernel of ``kind`` whose last node (signature form) is
    ``root``; ``base`` is the dialect-neutral context, ``n_ip``/``n_fp`` the argument counts."""
    # C++ has no zero-length arrays: an unused slot keeps the struct valid (runtime pads alike).
    extra = {"block": BLOCK, "n_ip": max(1, n_ip), "n_fp": max(1, n_fp)}
    attrs, dtype = dict(root.attrs), root.dtype
    if kind in ("map", "scatter"):
        extra["unflatten"] = unflatten(base["loops"], "flat")
    if kind == "scatter":
        extra["accumulate"] = _accumulate(attrs["op"], dtype, base["value"])
    elif kind in ("reduce", "argreduce"):
        extra.update(_reduce(base, attrs["op"], kind == "argreduce"))
    return extra


def unflatten(loops, flat):
    """Statements declaring the variables of ``loops`` (outermost first, as the C++ kernel nests
    them) from ``flat``, their row-major flat index: the last loop varies fastest."""
    if len(loops) <= 1:
        return [f"const int64_t {var} = {flat};" for var, _ in loops]
    rest = f"{flat}_rest"
    lines = [f"int64_t {rest} = {flat};"]
    for var, bound in reversed(loops[1:]):
        lines.append(f"const int64_t {var} = {rest} % ({bound}); {rest} /= ({bound});")
    lines.append(f"const int64_t {loops[0][0]} = {rest};")     # what is left is below its bound
    return lines


def _reduce(base, op, arg):
    """Shared memory, the per-thread store and (argreduce) the merge of the block's tree reduction.
    Merges read ``parts[t]`` into the thread's own ``acc``, as the C++ kernel's merge does."""
    shared = [f"__shared__ {base['acc_type']} parts[{BLOCK}];"]
    store = "parts[lane] = acc;"
    extra = {"outer_index": unflatten(base["outer"], "o"), "inner_index": unflatten(base["inner"], "r")}
    if arg:
        shared.append(f"__shared__ int64_t parts_i[{BLOCK}];")
        store += " parts_i[lane] = acc_i;"
        extra["merge"] = _arg_merge(">" if op == "max" else "<")
    return {**extra, "shared": shared, "store": store}


def _arg_merge(cmp):
    """Take the other partial when it is more extreme, or a NaN over a number, or equal (both NaN
    alike) with an earlier index: the first extreme wins, as in the sequential scan and numpy."""
    other, other_i = "parts[t]", "parts_i[t]"
    better = f"{other} {cmp} acc || ({other} != {other} && acc == acc)"
    tie = f"({other} == acc || ({other} != {other} && acc != acc)) && {other_i} < acc_i"
    return f"if ({better} || ({tie})) {{ acc = {other}; acc_i = {other_i}; }}"


def _accumulate(op, dtype, value):
    """One thread's update of ``out[o]``: other threads may update the same element at once."""
    if op == "replace":         # with duplicate targets, which write lands is unspecified (numpy too)
        return f"out[o] = {value};"
    if dtype == "bool":         # OR (add, max) or AND (mul, min): racing writers all store one value
        return f"if ({value}) out[o] = true;" if op in ("add", "max") else f"if (!({value})) out[o] = false;"
    return f"jt_atomic_{op}(&out[o], ({dtypes.C_TYPES[dtype]})({value}));"
