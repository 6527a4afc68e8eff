"""Liveness for MPI jobs: one rank's mistake should end the job with a readable error, not a hang.

- ``watch(what)``: a watchdog. A blocking MPI call that has not returned within
  ``JTMINI_MPI_TIMEOUT`` seconds (``flags.mpi_timeout``, default 300) prints ``what`` (op, shape,
  dtype, rank) and calls ``MPI_Abort``, which ends every rank.
- ``check_same(comm, signature)``: with ``JTMINI_MPI_DEBUG=1`` (``flags.mpi_debug``), every rank
  shares the signature of the call it is about to make (op, shape, dtype, root) and all raise
  ``MPIMismatchError`` when they differ: the ``if jt.rank == 0: x.mpi_all_reduce()`` deadlock
  becomes an error on every rank.
- ``install_excepthook()``: an uncaught exception on any rank prints its traceback prefixed with
  the rank and aborts the whole job, instead of leaving the other ranks waiting forever.
- ``departures``: exit notices. A rank that exits (the end of its script, ``sys.exit(1)``, a
  ``return`` in the wrong branch) tells every other rank how many collectives it issued. A rank
  waiting in a later collective then knows it can never complete and aborts the job at once,
  naming the rank that left, instead of waiting out the watchdog (and the exiting rank, stuck in
  ``MPI_Finalize``, with it).

    # rank 0: y = x.mpi_all_reduce()             # rank 1 never calls it
    # JTMINI_MPI_DEBUG=1 -> both ranks: MPIMismatchError: ranks called different MPI operations:
    #     rank 0: mpi_all_reduce(op='add') float32 (3,)
    #     rank 1: program exit
    # otherwise, when rank 1 exits -> rank 0: mpi_all_reduce(...) cannot complete: rank 1 has exited ...
    # and if rank 1 goes on without exiting, after JTMINI_MPI_TIMEOUT s -> rank 0: ... did not complete
"""
import os
import sys
import threading
import time
import traceback

import numpy as np

from .. import world
from ..flags import flags


class MPIMismatchError(RuntimeError):
    """Ranks were about to make different MPI calls (raised on every rank, in debug mode)."""


def _rank_tag():
    return f"[jtmini rank {world.rank}/{world.world_size}]"


def abort(message):
    """Print ``message`` tagged with the rank, then end every rank of the job."""
    print(f"{_rank_tag()} {message}", file=sys.stderr, flush=True)
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.COMM_WORLD.Abort(1)
    os._exit(1)


class _Watchdog:
    """One daemon thread for the whole process that polls the call in flight. Arming and disarming
    only set a field: no lock, and no thread woken per MPI call (on an oversubscribed node that
    wake-up competed with the ranks for the cores). The blocked MPI call runs in a ctypes (or
    mpi4py) call that releases the GIL, so this thread still gets to run and abort."""

    POLL_S = 0.25        # how late after its deadline a stuck call is reported, at most

    def __init__(self):
        self._armed = None           # (deadline, description, seconds, collective) while an MPI call is in flight
        self._thread = None
        self._start = threading.Lock()

    def arm(self, what, seconds, collective=None):
        """``collective``: the number of collectives this rank issued before this one, when it is one."""
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, name="jtmini-mpi-watchdog", daemon=True)
                    self._thread.start()
        self._armed = (time.monotonic() + seconds, what, seconds, collective)

    def disarm(self):
        self._armed = None

    def _loop(self):
        while True:
            armed = self._armed
            if armed is not None and time.monotonic() > armed[0]:
                abort(f"{_text(armed[1])} did not complete within {armed[2]:g} s (JTMINI_MPI_TIMEOUT): another "
                      "rank is probably not making this call (an MPI call inside `if jt.rank == ...`?); "
                      "aborting the MPI job")
            if armed is not None and armed[3] is not None:
                for rank, issued in departures.poll().items():
                    if issued <= armed[3]:
                        abort(f"{_text(armed[1])} cannot complete: rank {rank} has exited after {issued} "
                              f"collective(s), and this is collective {armed[3] + 1} of rank {world.rank}; "
                              "aborting the MPI job")
            time.sleep(self.POLL_S)


_watchdog = _Watchdog()


class _Departures:
    """Exit notices between ranks, on a communicator of their own (a duplicate of COMM_WORLD, so
    no receive of the user's can take one). Each notice is the count of collectives its sender
    issued; the watchdog thread polls for them while a collective is in flight, which needs
    ``MPI_THREAD_MULTIPLE`` (mpi4py asks for it): without it there are no notices, and the
    watchdog's timeout is left."""

    TAG = 1

    def __init__(self):
        self._comm = None
        self._left = {}              # rank -> collectives it issued before exiting

    def open(self, comm):
        """Called by every rank as MPI starts (``MPI_Comm_dup`` is collective)."""
        from mpi4py import MPI
        if MPI.Query_thread() == MPI.THREAD_MULTIPLE:
            self._comm = comm.Dup()

    def announce(self, issued):
        """Tell every other rank that this one exits after ``issued`` collectives."""
        if self._comm is None:
            return
        from mpi4py import MPI
        count = np.array([issued], np.int64)
        me = self._comm.Get_rank()
        requests = [self._comm.Isend(count, dest=r, tag=self.TAG) for r in range(self._comm.Get_size()) if r != me]
        MPI.Request.Waitall(requests)

    def poll(self):
        """``{rank: collectives issued}`` of every rank that has announced its exit so far."""
        if self._comm is None:
            return self._left
        from mpi4py import MPI
        status = MPI.Status()
        while self._comm.Iprobe(source=MPI.ANY_SOURCE, tag=self.TAG, status=status):
            count = np.empty(1, np.int64)
            self._comm.Recv(count, source=status.Get_source(), tag=self.TAG)
            self._left[status.Get_source()] = int(count[0])
        return self._left


departures = _Departures()


class watch:
    """``with watch(what):`` aborts the job if the block has not finished within
    ``JTMINI_MPI_TIMEOUT`` seconds, or, for a collective (``collective``: how many this rank issued
    before it), as soon as a rank that will never make it has exited. ``what`` is the description,
    or a function that makes it (called only if the watchdog fires: a hot loop of small
    collectives should not format strings)."""

    def __init__(self, what, collective=None):
        self.what, self.collective = what, collective

    def __enter__(self):
        _watchdog.arm(self.what, flags.mpi_timeout, self.collective)

    def __exit__(self, *exc):
        _watchdog.disarm()


def _text(what):
    return what() if callable(what) else what


def check_same(comm, signature):
    """In debug mode, raise MPIMismatchError on every rank unless all ranks pass equal signatures
    (``signature``: a string, or a function making it, called only in debug mode)."""
    if not flags.mpi_debug:
        return
    signature = _text(signature)
    with watch(f"debug check before {signature} on rank {world.rank}"):
        signatures = comm.allgather(signature)
    if any(s != signatures[0] for s in signatures):
        lines = "\n".join(f"    rank {r}: {s}" for r, s in enumerate(signatures))
        raise MPIMismatchError(f"ranks called different MPI operations (JTMINI_MPI_DEBUG=1):\n{lines}\n"
                               "every rank must make the same MPI calls in the same order")


def report_and_abort(kind, value, tb):
    """Print an exception's traceback, every line tagged with the rank, and end the job."""
    text = "".join(traceback.format_exception(kind, value, tb))
    tag = _rank_tag()
    body = "\n".join(f"{tag} {line}" for line in text.rstrip("\n").split("\n"))
    abort(f"uncaught exception, ending the whole MPI job:\n{body}")


def install_excepthook():
    """Make an uncaught exception on this rank end every rank (cheap: no MPI call until it fires).

    Before MPI is initialised there is nothing to abort: the rank exits with status 1 and mpirun
    ends the job."""
    sys.excepthook = report_and_abort
