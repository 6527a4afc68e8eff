"""Living next to PyTorch in one process.

    >>> import jtmini as jt
    >>> jt.dirty_fix_pytorch_runtime_error()     # imports torch now
    >>> import torch
"""
import importlib


def dirty_fix_pytorch_runtime_error():
    """Import PyTorch now, before any kernel library of jtmini is loaded; ModuleNotFoundError
    if it is not installed (as in Jittor, which callers wrap in ``try``).

    Jittor loads its kernels with global symbols and must let torch's shared libraries come
    first; jtmini loads each kernel library with local symbols (ctypes' default), so only the
    import order is left to fix, and importing torch here is all the call has to do.

        >>> jt.dirty_fix_pytorch_runtime_error(); import torch
    """
    importlib.import_module("torch")
