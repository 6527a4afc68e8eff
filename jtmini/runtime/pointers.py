"""The address of a numpy array's data, for passing buffers to compiled code.

``array.ctypes.data`` builds a helper object and costs ~1.3 us; a kernel launch passes five or six
buffers, and a ResNet-18 step launches a few hundred kernels and library calls. numpy's C ABI keeps the data pointer right
after the object header (the field ``PyArray_DATA`` reads, which every compiled extension relies
on), so ``address`` reads it there in ~0.2 us. The offset is checked against ``ctypes.data`` when
this module loads; if it does not hold (another Python build), ``address`` is ``ctypes.data``.

    >>> a = np.zeros(4)
    >>> address(a) == a.ctypes.data
    True
"""
import ctypes

import numpy as np

_HEADER = object.__basicsize__          # sizeof(PyObject): where PyArrayObject's data pointer is
_read_pointer = ctypes.c_void_p.from_address


def _fast(array):
    return _read_pointer(id(array) + _HEADER).value


def _slow(array):
    return array.ctypes.data


def _offset_holds():
    probes = [np.empty(3, np.float32), np.arange(6.0).reshape(2, 3).T, np.empty(0), np.empty(1 << 20, np.int8)[5:]]
    return all(_fast(p) == p.ctypes.data for p in probes)


address = _fast if _offset_holds() else _slow
