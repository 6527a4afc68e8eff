"""Files in the shared cache folder, written so that a reader never sees half of one.

Processes and MPI ranks share the cache (compiled kernels, generated code, compiled templates);
each file is written under a temporary name in the same folder and renamed over the final name,
an atomic step on POSIX file systems.

    >>> write_atomically("/tmp/jtmini_doc.txt", "whole or nothing\\n")
"""
import contextlib
import os
import tempfile


def write_atomically(path, data, tmp=None):
    """Write ``data`` (str or bytes) to ``path`` via ``tmp`` (a fresh name in ``path``'s folder
    unless given: the compiler names its own so that leftovers of killed processes can be told
    apart). On any failure the temporary file is removed and the error raised; ``path`` keeps
    what it held."""
    if tmp is None:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", suffix=".tmp")
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        with open(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
