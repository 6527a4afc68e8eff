"""Saving and loading checkpoints: pickles of numpy arrays, written atomically.

``save`` writes a temporary file in the target's directory, flushes it to disk, then renames it
over the target (``os.replace`` is atomic on POSIX): a reader, or a crash at any moment, sees
either the old file or the new one, never a torn mix. The file ends up with the permissions
``open(path, "wb")`` would give it: an existing file keeps its mode, a new one gets 0666 less
the umask.

    >>> from jtmini import nn
    >>> nn.save({"w": np.ones(3)}, "/tmp/ckpt.pkl")
    >>> nn.load("/tmp/ckpt.pkl")["w"]
    array([1., 1., 1.])
"""
import os
import pickle
import secrets
import stat


def save(obj, path):
    """Pickle ``obj`` to ``path`` atomically; Vars inside should be converted first
    (``Module.state_dict()`` and ``Optimizer.state_dict()`` hold numpy arrays)."""
    path = os.fspath(path)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())      # the bytes must be on disk before the name points at them
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _create_temp(path):
    """(fd, name) of a new file next to ``path``. It is created with mode 0666, which the kernel
    reduces by the umask exactly as for ``open(path, "wb")`` (mkstemp's 0600 would make every
    checkpoint private), then given the mode of the file it will replace, if there is one.
    Failing to create it is reported against ``path``: the temporary name means nothing to the
    caller."""
    directory, name = os.path.split(os.path.abspath(path))
    try:
        existing_mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        existing_mode = None
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            continue
        except OSError as e:
            raise type(e)(e.errno, e.strerror, path) from None
        if existing_mode is not None:
            os.fchmod(fd, existing_mode)
        return fd, tmp
    raise FileExistsError(f"cannot save to {path!r}: no free temporary name in {directory!r}")


def load(path):
    """The object pickled at ``path``."""
    with open(path, "rb") as f:
        return pickle.load(f)
