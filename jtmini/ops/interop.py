"""Living beside other frameworks in one process."""
from .registry import export


@export("dirty_fix_pytorch_runtime_error", method=False)
def dirty_fix_pytorch_runtime_error():
    """Import PyTorch now, as Jittor's function of this name does before its own libraries can
    clash with PyTorch's. jtmini loads its kernels privately (ctypes, no global symbols), so there
    is nothing to fix: importing torch early is all it does. ImportError when torch is missing.

    >>> jt.dirty_fix_pytorch_runtime_error()
    >>> import torch
    """
    import torch  # noqa: F401
