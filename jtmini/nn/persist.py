"""Saving and loading checkpoints: pickles of numpy arrays, written atomically.

``save`` writes a temporary file in the target's directory, flushes it to disk, then renames it
over the target (``os.replace`` is atomic on POSIX): a reader, or a crash at any moment, sees
either the old file or the new one, never a torn mix.

    >>> from jtmini import nn
    >>> nn.save({"w": np.ones(3)}, "/tmp/ckpt.pkl")
    >>> nn.load("/tmp/ckpt.pkl")["w"]
    array([1., 1., 1.])
"""
import os
import pickle
import tempfile


def save(obj, path):
    """Pickle ``obj`` to ``path`` atomically; Vars inside should be converted first
    (``Module.state_dict()`` and ``Optimizer.state_dict()`` hold numpy arrays)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())      # the bytes must be on disk before the name points at them
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load(path):
    """The object pickled at ``path``."""
    with open(path, "rb") as f:
        return pickle.load(f)
