"""The backend interface: everything the executor and the ops ask of a runtime.

A backend is one module of this package plus its templates (``templates/<dialect>/``): the module
defines ``BACKEND``, an instance of a ``Backend`` subclass, and ``get(name)`` finds it by name.
The executor runs every step through it, and a library op's ``run(arrays, attrs, backend)``
reaches its hand-written kernels and library calls through it, so ``ops/`` imports neither a
runtime nor the compiler nor codegen.

    >>> from jtmini.runtime import base
    >>> base.get("cpu").dialect
    'cpu'
"""
import contextlib
import importlib

from .. import schedule


class Backend:
    """The entry points of a runtime. ``read(var)`` (in the ``run_*`` methods) gives the buffer
    holding a Var's value on this backend."""
    name = None          # what ``get`` finds it by
    dialect = None       # the templates folder its kernels are written from

    def build(self, kernels, steps=()):
        """``{id(kernel): compiled}`` for ``schedule.Kernel`` s, compiling the missing ones;
        ``steps`` (the plan's) may start the hand-written kernels its library calls will want."""
        raise NotImplementedError

    def run_step(self, step, compiled, read):
        """``(roots, buffers)`` of one ``schedule`` step, run by the entry point of its kind;
        ``compiled`` is what ``build`` gave a kernel."""
        if type(step) is schedule.Kernel:
            return step.roots, self.run_kernel(step, compiled, read)
        if type(step) is schedule.LibraryCall:
            return [step.root], [self.run_library(step, read)]
        if type(step) is schedule.View:
            return [step.root], self.source_arrays(step, read)
        return [step.root], [self.run_collective(step, read)]

    def stepwise(self):
        """A context the executor runs a plan's steps in, one by one (a graph's first run, and
        hits this backend has no prepared program for). The default: nothing."""
        return contextlib.nullcontext()

    def run_kernel(self, kernel, compiled, read):
        """Run a generated kernel; returns the buffers of ``kernel.roots``."""
        raise NotImplementedError

    def run_library(self, step, read):
        """Run a ``schedule.LibraryCall``: the op's ``run(arrays, attrs, backend)``, or this
        backend's own implementation of the op."""
        raise NotImplementedError

    def run_collective(self, step, read):
        """Issue a ``schedule.Collective`` (MPI, NCCL); returns its output buffer."""
        raise NotImplementedError

    def source_arrays(self, step, read):
        """The arrays a library call, view or collective reads: its sources through their views."""
        raise NotImplementedError

    def to_host(self, array):
        """A buffer of this backend as a numpy array."""
        raise NotImplementedError

    def kernel(self, template, **context):
        """The hand-written kernel ``templates/<dialect>/<template>`` rendered with ``context``,
        built, cached and loaded, as a ``HandKernel``."""
        return self.kernels(template, [context])[0]

    def kernels(self, template, contexts):
        """``kernel`` for several contexts at once, built in parallel."""
        raise NotImplementedError

    def prepare_kernel(self, template, **context):
        """Start building ``kernel(template, **context)`` in the background, for a library op
        whose node was just built (it overlaps building the rest of the graph)."""
        raise NotImplementedError

    def matmul(self, a, b):
        """numpy-style batched matrix product of two arrays of this backend."""
        raise NotImplementedError

    def cblas_gemm(self, dtype):
        """``runtime.blas.Cblas`` (address and integer type) of the host BLAS's gemm for the
        numpy ``dtype``, for hand-written host kernels that multiply matrices; None if none."""
        raise NotImplementedError

    def thread_count(self):
        """Threads a kernel runs on."""
        raise NotImplementedError

    def prepare(self, template, vars_):
        """What this backend can work out once from a stored plan (``replay._Template``) to run
        its later hits faster, given the Vars of one hit; None (the default): hits run the plan's
        steps like any other."""
        return None

    def run_prepared(self, program, vars_, recorder=None):
        """Run a graph on what ``prepare`` made of its plan; ``vars_`` in the plan's positions.
        Sets the targets' values; returns ``(kernels, library calls)`` run, or None where this hit
        is to run the plan's steps instead (nothing run yet). A ``profiler`` recorder
        (``jt.profile_scope``) gets each step's span."""
        raise NotImplementedError


class HandKernel:
    """A loaded hand-written kernel: ``run(arrays, ints, floats, threads)`` with C-contiguous
    arrays (the output last), integer and float arguments; ``run_fastest`` lets the backend pick
    the thread count that ran this kernel fastest at ``size`` (results must not depend on it)."""

    def run(self, arrays, ints, floats, threads=1):
        raise NotImplementedError

    def run_fastest(self, arrays, ints, floats, size):
        raise NotImplementedError


def get(name):
    """The ``Backend`` of the runtime module ``name`` ("cpu", "cuda"), imported on first use."""
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__package__}.{name}":
            raise
        raise ValueError(f"no backend named {name!r}: jtmini/runtime/{name}.py does not exist") from None
    backend = getattr(module, "BACKEND", None)
    if not isinstance(backend, Backend):
        raise ValueError(f"jtmini/runtime/{name}.py is not a backend: it defines no BACKEND (a runtime.base.Backend)")
    return backend
