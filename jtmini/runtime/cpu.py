"""Load compiled CPU kernels and call them on numpy buffers.

Every kernel has the signature ``void jt_kernel(void** bufs, const int64_t* ip, const double* fp,
int nt)``: buffer pointers (inputs then output), integer arguments (dims, integer constants),
float constants, and the thread count.
"""
import ctypes

import numpy as np

_loaded = {}


def load(path):
    """The ``jt_kernel`` function of the library at ``path`` (loaded once per process)."""
    fn = _loaded.get(path)
    if fn is None:
        fn = ctypes.CDLL(path).jt_kernel
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        fn.restype = None
        _loaded[path] = fn
    return fn


def call(fn, arrays, ints, floats, threads):
    """Run a loaded kernel; ``arrays`` are C-contiguous numpy arrays, the output last."""
    ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    ip = np.asarray(ints, dtype=np.int64)
    fp = np.asarray(floats, dtype=np.float64)
    fn(ptrs, ip.ctypes.data, fp.ctypes.data, threads)
