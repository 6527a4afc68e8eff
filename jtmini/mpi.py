"""``jt.mpi``: the MPI module, as in Jittor. ``jt.mpi`` is this module under mpirun and ``None``
otherwise, so Jittor code written as ``if jt.mpi: ...`` runs unchanged.

    $ mpirun -np 2 python -c "import jtmini as jt; print(jt.mpi.world_rank(), jt.rank)"
    # rank 0: 0 0
    # rank 1: 1 1

Collectives are lazy ops with gradients (``jt.mpi.mpi_all_reduce(x, op)`` is ``x.mpi_all_reduce(op)``,
see ``jtmini/ops/collective.py``). Point-to-point calls are eager: they run when called, after
every collective created before them has been issued, so program order is kept on every rank.
Importing this module starts nothing: MPI is initialised by the first MPI call.
"""
import atexit
import contextlib
import functools
import socket

import numpy as np

from . import dtypes, world
from .creation import array
from .ops.collective import (mpi_all_gather, mpi_all_reduce, mpi_all_reduce_many, mpi_all_to_all,  # noqa: F401
                             mpi_broadcast, mpi_broadcast_many, mpi_gather, mpi_reduce, mpi_reduce_scatter,
                             mpi_scatter)
from .runtime import mpi as _runtime
from .runtime import mpi_guard
from .runtime.mpi_guard import MPIMismatchError  # noqa: F401


def install_hooks():
    """Called by ``import jtmini`` under mpirun (cheap: no MPI call). An uncaught exception on this
    rank ends the whole job, and at exit queued collectives are issued (and, with
    ``JTMINI_MPI_DEBUG=1``, every rank is checked to have reached the end)."""
    mpi_guard.install_excepthook()
    atexit.register(_runtime.at_exit)


def world_size():
    """Number of ranks (1 outside mpirun and inside ``single_process_scope``)."""
    return world.world_size


def world_rank():
    """This process's rank, 0..world_size()-1."""
    return world.rank


def local_rank():
    """This process's rank among the ranks on its node (to pick a GPU, for instance)."""
    return world.local_rank


def barrier():
    """Wait until every rank reaches this call.

        >>> jt.mpi.barrier()      # rank 0: returns once rank 1 got here too    rank 1: likewise
    """
    if not world.in_mpi:
        return
    _runtime.flush()          # lazy collectives created earlier go first, as in program order
    comm = _runtime.comm()
    mpi_guard.check_same(comm, "barrier()")
    mpi_guard.fingerprints.record(_runtime.BARRIER)
    with mpi_guard.watch(f"barrier() on rank {world.rank}", collective=_runtime.next_collective()):
        comm.Barrier()


def mpi_test(cmd=""):
    """Jittor's ``mpi_ops.mpi_test(cmd)``: check that MPI answers, print
    ``Hello world from processor <name>, rank <r> out of <n> processors`` and return a float32
    Var holding 123. Under mpirun every rank all-reduces a 1 and the sum must be the world size
    (a RuntimeError otherwise); outside it, this process is rank 0 of 1. ``cmd`` is ignored, as
    in Jittor.

        >>> jt.compile_extern.mpi_ops.mpi_test("").item()     # under mpirun
        123.0
    """
    if world.in_mpi:
        from mpi4py import MPI
        _runtime.flush()          # lazy collectives created earlier go first, as in program order
        comm = _runtime.comm()
        name, rank, size = MPI.Get_processor_name(), comm.Get_rank(), comm.Get_size()
        with mpi_guard.watch(f"mpi_test on rank {rank}"):
            answered = comm.allreduce(1)
        if answered != size:
            raise RuntimeError(f"mpi_test: an all-reduce of 1 over {size} ranks gave {answered}")
    else:
        name, rank, size = socket.gethostname(), 0, 1
    print(f"Hello world from processor {name}, rank {rank} out of {size} processors", flush=True)
    return array(np.array([123], np.float32))


def _check_peer(name, peer):
    """``peer`` as an int (a numpy integer is fine), or ValueError naming it."""
    rank = world.as_rank(peer)
    if rank is None:
        raise ValueError(f"{name}: rank {peer!r} is not a rank of this job (ranks are 0..{world.world_size - 1}) "
                         f"on rank {world.rank}")
    if rank == world.rank:
        raise ValueError(f"{name}: rank {world.rank} cannot exchange messages with itself")
    return rank


def _buffer(x):
    return np.ascontiguousarray(x.numpy() if hasattr(x, "numpy") else x)


def broadcast(array, root):
    """Jittor's ``mpi.broadcast``: overwrite the numpy ``array`` in place, on every rank, with
    rank ``root``'s values (eager; the shapes and dtypes must agree on all ranks).

        >>> a = np.zeros(3) + jt.rank; jt.mpi.broadcast(a, 0)     # every rank: a == [0, 0, 0]
    """
    if world.as_rank(root) is None:
        raise ValueError(f"broadcast: root {root!r} is not a rank of this job (ranks are "
                         f"0..{world.world_size - 1})")
    root = world.as_rank(root)
    if not isinstance(array, np.ndarray) or not array.flags.writeable or not array.flags.c_contiguous:
        raise TypeError(f"broadcast: array must be a writeable C-contiguous numpy array, got "
                        f"{type(array).__name__}")
    comm = _runtime.comm()
    _runtime.flush()
    with mpi_guard.watch(f"broadcast({array.dtype} {array.shape}, root={root}) on rank {world.rank}"):
        comm.Bcast(array, root=root)


def send(x, dst, tag=0):
    """Send ``x`` (a Var or numpy array) to rank ``dst``; returns when the buffer may be reused.

        >>> if jt.rank == 0: jt.mpi.send(jt.array([1., 2.]), dst=1)
        >>> if jt.rank == 1: y = jt.mpi.recv((2,), "float32", src=0)   # rank 1: y = [1, 2]
    """
    dst = _check_peer("send", dst)
    data = _buffer(x)
    comm = _runtime.comm()
    _runtime.flush()
    with mpi_guard.watch(f"send({data.dtype} {data.shape}, dst={dst}, tag={tag}) on rank {world.rank}"):
        comm.Send(data, dest=dst, tag=tag)


def recv(shape, dtype, src, tag=0):
    """Receive a message of ``shape`` and ``dtype`` from rank ``src``; returns it as a Var. A
    message of another size is a ValueError naming both sizes."""
    return _irecv("recv", shape, dtype, src, tag).wait()


class Request:
    """A pending ``isend``/``irecv``; ``wait()`` blocks until it is done and returns the received
    Var (``irecv``) or None (``isend``). The buffer is kept alive until then."""

    def __init__(self, request, buffer, what, receives):
        self._request, self._buffer, self._what, self._receives = request, buffer, what, receives
        self._result = None

    def wait(self):
        if self._request is not None:
            with mpi_guard.watch(f"wait for {self._what} on rank {world.rank}"):
                self._complete(lambda status: self._request.Wait(status) or True)
        return self._result

    def test(self):
        """True when the transfer has completed (``wait()`` then returns at once)."""
        return self._request is None or self._complete(self._request.Test)

    def _complete(self, call):
        """``call(status)`` (Wait or Test); once the transfer is done, check the size of what
        arrived (a longer message fails as MPI_ERR_TRUNCATE) and keep it. False while not done."""
        from mpi4py import MPI
        status, truncated = MPI.Status(), False
        try:
            if not call(status):
                return False
        except MPI.Exception as e:
            if not (self._receives and e.Get_error_class() == MPI.ERR_TRUNCATE):
                raise
            truncated = True
        self._request, buffer, self._buffer = None, self._buffer, None
        if self._receives:
            _check_received(self._what, status, buffer, truncated)
            self._result = array(buffer)
        return True


def _check_received(what, status, buffer, truncated):
    """ValueError on the receiver unless the message had the size of ``buffer``. Open MPI reports
    a truncated message's full size; an MPI that does not is told only that it was longer."""
    from mpi4py import MPI
    sent = status.Get_count(MPI.BYTE)
    if not truncated and sent == buffer.nbytes:
        return
    if truncated and sent <= buffer.nbytes:
        told = "more bytes than that"
    else:
        values = sent // buffer.itemsize
        told = f"{sent} bytes" + (f" ({values} {buffer.dtype} values)" if values * buffer.itemsize == sent else "")
    raise ValueError(f"{what} on rank {world.rank}: rank {status.Get_source()} sent {told}, but this receive "
                     f"expects {buffer.nbytes} bytes ({buffer.size} {buffer.dtype} values, shape {buffer.shape}); "
                     "a receive's shape and dtype must match the message sent")


def isend(x, dst, tag=0):
    """Start sending ``x`` to rank ``dst``; returns a ``Request`` (call ``wait()`` before exiting)."""
    dst = _check_peer("isend", dst)
    data = _buffer(x)
    comm = _runtime.comm()
    _runtime.flush()
    what = f"isend({data.dtype} {data.shape}, dst={dst}, tag={tag})"
    return Request(comm.Isend(data, dest=dst, tag=tag), data, what, receives=False)


def irecv(shape, dtype, src, tag=0):
    """Start receiving a message of ``shape``/``dtype`` from rank ``src``; ``wait()`` returns it (a
    message of another size: ValueError naming both sizes).

        >>> req = jt.mpi.irecv((2,), "float32", src=0)    # on rank 1
        >>> y = req.wait()                                 # rank 1: what rank 0 sent
    """
    return _irecv("irecv", shape, dtype, src, tag)


def _irecv(name, shape, dtype, src, tag):
    src = _check_peer(name, src)
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
    data = np.empty(shape, dtype=dtypes.canonical(dtype))
    comm = _runtime.comm()
    _runtime.flush()
    what = f"{name}({data.dtype} {data.shape}, src={src}, tag={tag})"
    return Request(comm.Irecv(data, source=src, tag=tag), data, what, receives=True)


def single_process_scope(rank=0):
    """Decorator: run the function on rank ``rank`` only, with MPI switched off inside (collectives
    are identities, ``jt.in_mpi`` is False, ``jt.rank`` 0, ``jt.world_size`` 1, Datasets do not
    shard). Other ranks skip it and get None. Pending collectives are issued first on every rank.

        >>> @jt.single_process_scope()
        ... def val(): ...
        >>> val()        # rank 0: runs val() as one process    rank 1: returns None
    """
    def decorate(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            if not world.in_mpi:
                return fn(*args, **kwargs)
            _runtime.flush()
            if world.rank != rank:
                return None
            with _world_of_one():
                return fn(*args, **kwargs)
        return run
    return decorate


_ALONE = {"in_mpi": False, "rank": 0, "world_size": 1, "local_rank": 0, "local_size": 1, "alone_in_mpi_job": True}


@contextlib.contextmanager
def _world_of_one():
    """This process is alone for a while (``jt.rank`` and the like read the world module)."""
    saved = {name: getattr(world, name) for name in _ALONE}
    try:
        _set_world(_ALONE)
        yield
    finally:
        _set_world(saved)


def _set_world(values):
    for name, value in values.items():
        setattr(world, name, value)
