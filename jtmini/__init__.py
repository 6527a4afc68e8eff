"""jtmini: a small JIT-compiled deep-learning operator framework in the style of Jittor.

    >>> import jtmini as jt
    >>> a, b = jt.randn(1000), jt.randn(1000)
    >>> (jt.relu(a * b + 1)).sum().item()     # one fused, compiled kernel
"""
# The public API, re-exported (hence the noqa: these names are used by jtmini's users, not here).
import importlib as _importlib
import pkgutil as _pkgutil
import sys as _sys

from . import creation, ops, state, world  # noqa: F401

# Every module of ops/ registers its ops and functions when imported: a new op module needs no
# line here.
for _module in _pkgutil.iter_modules(ops.__path__):
    _importlib.import_module(f"{ops.__name__}.{_module.name}")
from . import mpi as _mpi
from .autograd import enable_grad, grad, no_grad  # noqa: F401
from .compiler import VERSION as __version__  # noqa: F401
from .counters import reset_stats, stats  # noqa: F401
from .executor import clean, fetch, sync, sync_all  # noqa: F401
from .executor import clean as gc  # noqa: F401   Jittor's jt.gc(): free what nothing uses, now
from .flags import flag_scope, flags  # noqa: F401
from .interop import dirty_fix_pytorch_runtime_error  # noqa: F401
from .introspection import (dump_all_graphs, graph_check, liveness_info, number_of_hold_vars,  # noqa: F401
                            number_of_lived_ops, number_of_lived_vars, _print_var_slice)
from .dtypes import NanoString  # noqa: F401
from .log import LOG, log_capture_scope  # noqa: F401
from .profiler import profile_mark, profile_scope  # noqa: F401
from .memory_profile import get_max_memory_treemap  # noqa: F401
from .state import clear_caches  # noqa: F401
from .var import Var, install_methods, pending_roots  # noqa: F401
from .var import Shape as NanoVector  # noqa: F401   Jittor's shape type: a tuple of ints here

install_methods()
from . import init  # noqa: E402,F401  (cheap; binds Jittor's Var.uniform_, Var.zero_, ... methods)
globals().update(ops.FUNCTIONS)
globals().update(creation.DTYPES)        # jt.float32, jt.int64, ...: dtypes that cast when called
globals().update(float=creation.DTYPES["float32"], int=creation.DTYPES["int32"],   # Jittor's aliases
                 half=creation.DTYPES["float16"], double=creation.DTYPES["float64"])

mpi = _mpi if world.in_mpi else None    # as in Jittor: `if jt.mpi:` is False outside mpirun
single_process_scope = _mpi.single_process_scope
# Jittor's cuDNN binding, None where cuDNN is absent; jtmini binds no cuDNN, so code that asks
# `if jt.cudnn:` takes its portable path (RNNs, convolutions run on jtmini's own kernels).
cudnn = None
if world.in_mpi:
    _mpi.install_hooks()                # an uncaught exception on any rank ends the whole job


def __getattr__(name):
    if name in ("in_mpi", "rank", "world_size", "local_rank"):    # live: single_process_scope changes them
        return getattr(world, name)
    # the training stack is imported on first use, so `import jtmini` stays cheap
    if name in ("nn", "optim", "init", "models", "lr_scheduler", "misc", "transform", "dataset",
                "compile_extern", "distributions", "loss3d", "contrib", "attention", "gradfunctional"):
        return _importlib.import_module(f"{__name__}.{name}")
    if name in ("linalg", "sparse"):      # LAPACK-backed matrix functions, sparse COO Vars
        return _importlib.import_module(f"{__name__}.{name}")
    if name in ("core", "jittor_core"):     # Jittor's C++ core module; jtmini has no separate core
        return _sys.modules[__name__]
    if name == "Module":
        from .nn import Module
        return Module
    if name == "make_module":
        from .nn.module import make_module
        return make_module
    if name in ("make_grid", "save_image"):     # image grids (save_image needs Pillow)
        from . import imageutil
        return getattr(imageutil, name)
    if name in ("ctc_loss", "CTCLoss"):    # Jittor's jt.ctc_loss, jt.CTCLoss
        from .nn import ctc
        return getattr(ctc, name)
    if name in ("save", "load", "safepickle", "safeunpickle"):    # checkpoints, loaded without running code
        from . import persist
        return getattr(persist, {"safepickle": "save", "safeunpickle": "load"}.get(name, name))
    if name == "has_cuda":              # probing the GPU loads cupy: only when asked
        from .runtime.cuda import has_cuda
        return has_cuda()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

