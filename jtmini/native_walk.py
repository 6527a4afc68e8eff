"""The graph walks of a step compiled: the replay signature's (``replay._signature``) and the
gradient recipe key's (``grad_recipe.graph_and_key``), against this interpreter's C
API (``templates/cpu/signature_walk.cc.j2``): the same rows (as ``key_code`` bytes), order and
leaves, ~5x less CPU.

Walking a step's graph in Python costs ~1.5-2 us a Var (a GAN step: ~200 Vars walked, ~0.33 ms of
~2.5); the C walk reads the same attributes through the C API. It is built once per interpreter
and machine (the disk cache keys it by the source, which names the interpreter's headers and
version); where it cannot be built or loaded, ``walk`` returns None and the Python walk runs.
It is used once a graph repeats (``enable``, called by a replay or gradient-recipe hit): building
it on an empty disk cache takes ~1-4 s of compiler, which a cold first step, or a process that
never repeats a graph, should not wait for. Both walks give the same keys, so the switch keeps
every stored plan and recipe. The same library makes a gradient recipe's nodes (``make_nodes``:
``var.made``'s Vars, slot by slot), ~1 ms of a seq2seq step's ~950 backward nodes in Python, and
walks the pending table for ``pending_roots``.

    >>> code, others, order, leaves, places = walk([y])       # y: a pending Var
    >>> order, (code, others), places = grad_walk(loss, [w], True)
"""
import ctypes
import functools
import logging
import operator
import sys
import sysconfig
from pathlib import Path

from . import codegen, compiler
from .dtypes import NanoString
from .ops.registry import OPS
from .var import Shape, Var, pending_roots as var_pending_roots

_log = logging.getLogger(__name__)
_enabled = False
_VAR_GLOBALS = vars(sys.modules[Var.__module__])   # what jt_make_nodes reads: _ids, _pending, ...
_by_id = operator.attrgetter("id")
_KINDS = (Shape, NanoString, Var)    # written as tuple and str by key_code; the class whose slots are read


def enable():
    """Walk in C from now on (the library is built, or loaded from the disk cache, on the next walk)."""
    global _enabled
    _enabled = True


@functools.lru_cache(maxsize=None)
def _library():
    """The compiled walks (built once), or None where they cannot be built."""
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file() or '"' in str(include):
        return None
    try:
        source = codegen.render("cpu", "signature_walk", python_include=str(include),
                                python_version=sys.version.replace("\n", " "))
        library = ctypes.PyDLL(compiler.build(source))
        signature, grad = library.jt_signature_walk, library.jt_grad_walk
        library.jt_make_nodes, library.jt_pending_roots     # noqa: B018 (an old library lacks them)
    except (compiler.CompileError, compiler.ToolchainError, OSError, AttributeError) as e:
        _log.warning("the compiled graph walks are unavailable (%s): graphs are walked in Python", e)
        return None
    signature.argtypes, signature.restype = [ctypes.py_object] * 3, ctypes.py_object
    grad.argtypes = [ctypes.py_object] * 4 + [ctypes.c_int]
    grad.restype = ctypes.py_object
    make = library.jt_make_nodes
    make.argtypes, make.restype = [ctypes.py_object] * 5, ctypes.py_object
    roots = library.jt_pending_roots
    roots.argtypes, roots.restype = [ctypes.py_object] * 2, ctypes.py_object
    return library


def _walker():
    """``jt_signature_walk(targets, ops)``, or None where it cannot be built or is not enabled."""
    library = _library() if _enabled else None
    return None if library is None else library.jt_signature_walk


def walk(targets):
    """``(code, others, order, leaves, target places)`` of the graph computing ``targets`` (a list
    of Vars) as ``replay._signature_py`` walks it (its rows as ``key_code`` writes them), or None
    when the compiled walk is unavailable. Raises what the Python walk would not survive either
    (an unregistered op: KeyError)."""
    fn = _walker()
    return None if fn is None else fn(targets, OPS, _KINDS)


def grad_walk(loss, targets, keyed):
    """``(order, code, places)``: ``grad_recipe.forward_order(loss)``, the key rows ``grad_recipe``
    writes for it as ``key_code``'s ``(bytes, others)`` (None when ``keyed`` is false or the graph
    gets no key) and each target's place in the order (-1 when absent); None when the compiled
    walk is unavailable or not enabled."""
    library = _library() if _enabled else None
    return None if library is None else library.jt_grad_walk(loss, targets, OPS, _KINDS, int(bool(keyed)))


def make_nodes(nodes, order, shared):
    """The Vars ``grad_recipe.Recipe.build`` makes from its ``nodes`` on a new forward ``order``, as
    ``var.made`` makes them (in C, ~0.3 us a node against ~0.7 for ``made``); None when the compiled
    walks are unavailable or not enabled."""
    library = _library() if _enabled else None
    if library is None:
        return None
    built = library.jt_make_nodes(nodes, order, shared, _VAR_GLOBALS, Var)
    return None if built is NotImplemented else built


def pending_roots():
    """``var.pending_roots()``: its walk over the pending table in C where the library is loaded
    (~3000 entries an optimizer step of a seq2seq: ~0.2 ms in Python), the same roots in the same
    order, the dead entries dropped alike."""
    library = _library() if _enabled else None
    found = None if library is None else library.jt_pending_roots(_VAR_GLOBALS["_pending"], Var)
    if found is None or found is NotImplemented:
        return var_pending_roots()
    roots, dead = found
    table = _VAR_GLOBALS["_pending"]
    for key in dead:
        del table[key]
    return sorted(roots, key=_by_id)
