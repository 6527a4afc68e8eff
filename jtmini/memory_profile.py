"""Where the memory goes at its peak: Jittor's ``profile_memory_enable`` flag and
``jt.get_max_memory_treemap()``.

While ``jt.flags.profile_memory_enable`` is on, each Var built records the Python frames that
built it (outside jtmini), and each schedule counts the bytes of Var buffers alive after every
step: the ones computed Vars already held when the schedule began, and the schedule's own
intermediate and result buffers. The highest count seen, with the buffers alive then, is kept
until the flag is turned on again. ``get_max_memory_treemap``
shows it as a tree of the frames that built those buffers, largest first.

    >>> with jt.flag_scope(profile_memory_enable=1):
    ...     y = (jt.randn(256, 256) @ jt.randn(256, 256)).relu()
    ...     y.sync()
    ...     tree, text = jt.get_max_memory_treemap(do_print=False)
    >>> tree["size"] > 0
    True

Counting walks the objects Python's collector tracks once per schedule and takes a frame walk per
Var built: several times slower graph building, so profile a few steps, not a training run.
"""
import collections
import gc
import os
import sys
import typing
import weakref

from .flags import flags, on_memory_profiling
from .state import services
from .var import Var

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_MAX_FRAMES = 24            # outermost first; deeper frames are cut from the outer end


class Frame(typing.NamedTuple):
    """A Python frame that built a Var: ``path`` is ``file:line``, ``name`` adds the function."""
    path: str
    name: str


class Buffer(typing.NamedTuple):
    """One buffer alive at the peak: what it holds and the frames that built its Var."""
    info: str
    size: int
    stack: tuple


class Peak(typing.NamedTuple):
    size: int
    buffers: tuple


_stacks = {}                # id(Var) -> (weak reference, frames), while profiling
_peak = Peak(0, ())


def _start():
    global _peak
    _peak = Peak(0, ())
    _stacks.clear()


on_memory_profiling.append(_start)


def record_creation(v):
    """Keep the frames outside jtmini that built ``v`` (Var.node calls this while profiling)."""
    frames, frame = [], sys._getframe(1)
    while frame is not None and len(frames) < _MAX_FRAMES:
        file = frame.f_code.co_filename
        if not os.path.abspath(file).startswith(_PACKAGE):
            where = f"{file}:{frame.f_lineno}"
            frames.append(Frame(where, f"{where}({frame.f_code.co_name})"))
        frame = frame.f_back
    key = id(v)
    _stacks[key] = (weakref.ref(v, lambda _, k=key: _stacks.pop(k, None)), tuple(reversed(frames)))


services.record_creation = record_creation


def _stack_of(v):
    entry = _stacks.get(id(v))
    return entry[1] if entry is not None and entry[0]() is v else ()


def _describe(v, array):
    return Buffer(f"{v.op or 'leaf'} {v.dtype}{list(v.shape)}", int(array.nbytes), _stack_of(v))


class Tracker:
    """Counts one schedule's live buffers after each step (see the module doc)."""

    def __init__(self):
        self.alive = {}             # id -> (Var, array) of the schedule's own buffers, while alive
        self.held = {}              # buffer address -> Buffer, of computed Vars alive at the start
        for o in gc.get_objects():
            if type(o) is Var and o._data is not None:
                self.held.setdefault(_base_address(o._data), _describe(o, o._data))

    def after_step(self, made, done):
        """A step made ``made`` ((Var, array) pairs) reading buffers that, for ``done`` (Vars),
        nothing reads later: count with both (they coexist while it runs), then forget the
        ``done`` ones that no Var holds."""
        global _peak
        for v, array in made:
            self.alive[id(v)] = (v, array)
        seen = dict(self.held)
        for v, array in self.alive.values():
            seen.setdefault(_base_address(array), _describe(v, array))
        size = sum(b.size for b in seen.values())
        if size > _peak.size:
            _peak = Peak(size, tuple(seen.values()))
        for v in done:
            if v._data is None:
                self.alive.pop(id(v), None)


def tracker():
    """A ``Tracker`` while ``flags.profile_memory_enable`` is on, else None (one flag read)."""
    return Tracker() if flags.profile_memory_enable else None


def _base_address(array):
    while isinstance(getattr(array, "base", None), type(array)):
        array = array.base
    return array.__array_interface__["data"][0] if hasattr(array, "__array_interface__") else id(array)


def get_max_memory_treemap(build_by=0, do_print=True):
    """The buffers alive at the highest memory use seen while ``flags.profile_memory_enable`` was
    on, as a tree of the Python frames that built them (``build_by=0``: by frame and function,
    ``1``: by ``file:line``), largest first. Returns ``(tree, text)``; prints the text too unless
    ``do_print=False``. Each node of ``tree`` is a dict: name, size (bytes), cnt, children.

    >>> tree, text = jt.get_max_memory_treemap(do_print=False)      # doctest: +SKIP
    """
    if build_by not in (0, 1):
        raise ValueError(f"get_max_memory_treemap: build_by must be 0 (by function) or 1 (by path), got {build_by!r}")
    tree = _node("root")
    for buf in sorted(_peak.buffers, key=lambda b: -b.size):
        now = _add(tree, buf)
        if not buf.stack:
            now = _add(_child(now, "(built before profile_memory_enable was on)"), buf)
        for frame in buf.stack:
            key = frame.name if build_by == 0 else frame.path
            now = _add(_child(now, key), buf)
        now["vinfo"].append(buf.info)
    _sort(tree)
    text = "\n".join(_lines(tree, _peak.size, "")) or "(nothing recorded: set jt.flags.profile_memory_enable)"
    if do_print:
        print(text)
    return tree, text


def _node(name):
    return {"name": name, "size": 0, "cnt": 0, "children": [], "vinfo": []}


def _child(node, name):
    for c in node["children"]:
        if c["name"] == name:
            return c
    node["children"].append(_node(name))
    return node["children"][-1]


def _add(node, buf):
    node["size"] += buf.size
    node["cnt"] += 1
    return node


def _sort(node):
    node["children"].sort(key=lambda c: -c["size"])
    for c in node["children"]:
        _sort(c)


def _lines(node, total, indent):
    share = 100.0 * node["size"] / total if total else 0.0
    head = f"{indent}{node['name']} [{node['size'] / 2**20:.2f} MB; {share:.2f}%; {node['cnt']} buffers]"
    kinds = collections.Counter(node["vinfo"]).most_common()
    out = [head] + [f"{indent}   {n} x {info}" for info, n in kinds[:8]]
    if len(kinds) > 8:
        out.append(f"{indent}   ... {len(kinds) - 8} more kinds of buffer")
    for c in node["children"]:
        out += _lines(c, total, indent + "|  ")
    return out
