"""Saving and loading checkpoints: pickles of numpy arrays, written atomically, read back
without running code from the file.

``save`` writes a temporary file in the target's directory, flushes it to disk, then renames it
over the target (``os.replace`` is atomic on POSIX): a reader, or a crash at any moment, sees
either the old file or the new one, never a torn mix. The file ends up with the permissions
``open(path, "wb")`` would give it: an existing file keeps its mode, a new one gets 0666 less
the umask.

``load`` unpickles with a fixed list of what a checkpoint may hold (numpy arrays, dtypes and
scalars, dicts, lists, tuples, sets, strings, numbers, None): a pickle can name any function to
call while it is read, and a file that names another one is refused, not run. Files written by
Jittor's ``jt.save`` (pickled numpy arrays) load, and so do PyTorch's ``torch.save`` files (its
zip format, PyTorch 1.6 and later) of tensors in dicts and lists, such as a state dict, as
Jittor's ``jt.load`` does for ``.pth`` files: their tensors come back as numpy arrays, read
without PyTorch and under the same fixed list, plus PyTorch's tensor rebuilding.

    >>> jt.save({"w": jt.ones(3), "step": 10}, "/tmp/ckpt.pkl")     # Vars are saved as arrays
    >>> jt.load("/tmp/ckpt.pkl")["w"]
    array([1., 1., 1.], dtype=float32)
"""
import contextlib
import io
import os
import pickle
import re
import secrets
import stat
import zipfile

import numpy as np

from .compiler import owner_is_dead, temp_owner
from .ops.registry import keyword_aliases
from .var import Var

# (module, name) a checkpoint's pickle may call: how numpy rebuilds arrays, dtypes and scalars
# (numpy 1 and 2 spell the module differently), and the containers pickle cannot spell itself
_ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("collections", "OrderedDict"),
            ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "complex"),
            ("builtins", "bytearray"), ("_codecs", "encode")}
_ALLOWED |= {(module, name) for module in ("numpy.core.multiarray", "numpy._core.multiarray")
             for name in ("_reconstruct", "scalar")}
_ALLOWED |= {(module, "_frombuffer") for module in ("numpy.core.numeric", "numpy._core.numeric")}
_ALLOWED |= {("numpy.dtypes", name) for name in dir(np.dtypes) if name.endswith("DType")}


class CheckpointError(ValueError):
    """A file that is not a checkpoint: it asks to run something a checkpoint never needs."""


def _values(obj):
    """``obj`` with every Var replaced by its value (a numpy array), through dicts, lists, tuples."""
    if isinstance(obj, Var):
        return obj.numpy()
    if isinstance(obj, dict):
        return type(obj)((k, _values(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_values(v) for v in obj)
    if isinstance(obj, str) and type(obj) is not str:      # a Var's dtype (NanoString) saves as its name
        return str(obj)
    return obj


@keyword_aliases(params_dict="obj")         # Jittor's name: jt.save(params_dict=..., path=...)
def save(obj, path):
    """Pickle ``obj`` to ``path`` atomically; Vars inside (in dicts, lists, tuples) are saved as
    their numpy values, as Jittor's ``jt.save`` does.

        >>> jt.save(model.state_dict(), "model.pkl")
    """
    obj = _values(obj)
    path = os.fspath(path)
    _sweep_temps(path)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())      # the bytes must be on disk before the name points at them
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:    # a full disk: say which save failed
            raise OSError(e.errno, f"{e.strerror}: cannot save {path}") from e
        raise


# a temporary name of _create_temp: .<name>.<pid>@<host>.<8 hex digits>.tmp
_TEMP_NAME = re.compile(r"^\..+\.(\d+@[A-Za-z0-9-]+)\.[0-9a-f]{8}\.tmp$")


def _sweep_temps(path):
    """Remove the temporary files that saves killed mid-write (by dead processes of this host)
    left in ``path``'s directory: each may be as big as a checkpoint."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        names = os.listdir(directory)
    except OSError:
        return                          # _create_temp reports an unusable directory
    for name in names:
        match = _TEMP_NAME.match(name)
        if match and owner_is_dead(match.group(1)):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


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
        # the owner's pid in the name lets a later save tell a dead writer's leftover (_sweep_temps)
        tmp = os.path.join(directory, f".{name}.{temp_owner()}.{secrets.token_hex(4)}.tmp")
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


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, path):
        super().__init__(file)
        self.path = path

    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise CheckpointError(f"{self.path}: refusing to load {module}.{name}: a checkpoint holds only "
                                  "numpy arrays, numbers, strings, None, lists, tuples, sets and dicts")
        return super().find_class(module, name)


# PyTorch's storage classes, by the numpy dtype of their elements
_TORCH_STORAGES = {"DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
                   "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
                   "ByteStorage": "uint8", "BoolStorage": "bool"}


def _torch_tensor(storage, offset, size, stride, *_):
    """``torch._utils._rebuild_tensor_v2``'s array: ``size`` elements of the flat ``storage`` from
    ``offset`` by ``stride`` (requires_grad, hooks and metadata dropped), a copy of its own."""
    if len(size) != len(stride) or any(n < 0 for n in size) or any(k < 0 for k in stride) or offset < 0:
        raise CheckpointError(f"a tensor of size {tuple(size)} and stride {tuple(stride)} is malformed")
    last = offset + sum((n - 1) * k for n, k in zip(size, stride)) if all(size) else offset - 1
    if last >= storage.size:
        raise CheckpointError(f"a tensor of size {tuple(size)} at offset {offset} reads past its "
                              f"storage of {storage.size} elements")
    view = np.lib.stride_tricks.as_strided(storage[offset:], tuple(size),
                                           tuple(k * storage.itemsize for k in stride))
    return np.array(view)


class _TorchUnpickler(_Unpickler):
    """The pickle of a ``torch.save`` zip file (``<name>/data.pkl``): tensors are rebuilt as numpy
    arrays from the zip's ``<name>/data/<key>`` entries; anything else PyTorch may name is refused."""
    def __init__(self, file, path, archive, prefix):
        super().__init__(file, path)
        self.archive, self.prefix = archive, prefix

    def find_class(self, module, name):
        if (module, name) in (("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor")):
            return _torch_tensor
        if (module, name) == ("torch._utils", "_rebuild_parameter"):
            return lambda data, *_: data
        if module == "torch" and name in _TORCH_STORAGES:
            return np.dtype(_TORCH_STORAGES[name])
        return super().find_class(module, name)

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], np.dtype)):
            raise CheckpointError(f"{self.path}: a PyTorch storage this loader does not read: {pid!r:.200}")
        _, dtype, key, _, numel = pid
        raw = self.archive.read(f"{self.prefix}data/{key}")
        if len(raw) < numel * dtype.itemsize:
            raise CheckpointError(f"{self.path}: storage {key} holds {len(raw)} bytes, not {numel} {dtype}")
        return np.frombuffer(raw, dtype, numel)


def _load_torch_zip(data, path):
    """The object of a ``torch.save`` zip file's bytes ``data``."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    names = archive.namelist()
    pickles = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
        raise CheckpointError(f"{path}: a zip file, but not one torch.save wrote (no single <name>/data.pkl)")
    prefix = pickles[0][:-len("data.pkl")]
    if f"{prefix}byteorder" in names and archive.read(f"{prefix}byteorder") != b"little":
        raise CheckpointError(f"{path}: a big-endian PyTorch checkpoint, which this loader does not read")
    return _TorchUnpickler(io.BytesIO(archive.read(pickles[0])), path, archive, prefix).load()


def load(path):
    """The object saved at ``path`` (Vars, and a ``torch.save`` file's tensors, come back as numpy
    arrays). A file whose pickle asks to call anything but numpy's or PyTorch's array rebuilding
    raises ``CheckpointError`` (a ValueError) naming the file and what it asked for, without
    running it.

        >>> model.load_state_dict(jt.load("model.pkl"))
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise CheckpointError(f"{path}: the file is empty, not a checkpoint (an interrupted copy?)")
    try:
        if data[:2] == b"PK":            # a zip's signature: torch.save's format (a pickle starts with \x80)
            return _load_torch_zip(data, path)
        return _Unpickler(io.BytesIO(data), path).load()
    except CheckpointError:
        raise
    except Exception as e:              # a truncated or foreign file: pickle raises many kinds
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(e).__name__}: {e})") from None


def load_dict(path, what):
    """``load(path)``, which must be a dict (a state dict): CheckpointError naming the file and
    what it holds otherwise, rather than a KeyError or TypeError from the loader that reads it."""
    obj = load(path)
    if not isinstance(obj, dict):
        raise CheckpointError(f"{os.fspath(path)}: holds a {type(obj).__name__}, not the dict {what} needs")
    return obj
