"""Liveness for MPI jobs: one rank's mistake should end the job with a readable error, not a hang.

- ``watch(what)``: a watchdog. A blocking MPI call that has not returned within
  ``JTMINI_MPI_TIMEOUT`` seconds (``flags.mpi_timeout``, default 300) prints ``what`` (op, shape,
  dtype, rank), names the ranks that are alive but have not reached the call, and calls
  ``MPI_Abort``, which ends every rank.
- ``peers``: heartbeats. Every second a daemon thread of each rank sends every other rank a small
  message carrying its recent collectives (``fingerprints``). A rank waiting in an MPI call that
  hears nothing from a peer for ``JTMINI_MPI_HEARTBEAT_TIMEOUT`` seconds (default 15: the peer is
  stopped, or frozen holding the GIL) aborts the job naming it. A peer busy in a long C kernel or
  compile still answers: ctypes and subprocess release the GIL, so its thread keeps beating.
- ``fingerprints``: every rank hashes each collective it issues (op, reduce op, root, dtype,
  shape) into a running fingerprint. Heartbeats and exit notices carry the last ones, so ranks
  whose collectives differ (``mpi_broadcast(root=jt.rank)``, "max" on one rank and "add" on
  another, a skipped call) are stopped within a heartbeat or two, or at exit, with an error naming
  the first collective where they differ. The main thread pays one deque append per collective;
  the watchdog thread hashes.
- ``check_same(comm, signature)``: with ``JTMINI_MPI_DEBUG=1`` (``flags.mpi_debug``), every rank
  shares the signature of the call it is about to make (op, shape, dtype, root) and all raise
  ``MPIMismatchError`` when they differ, before the call is made: the
  ``if jt.rank == 0: x.mpi_all_reduce()`` deadlock becomes an error on every rank.
- ``install_excepthook()``: an uncaught exception on any rank prints its traceback prefixed with
  the rank and aborts the whole job, instead of leaving the other ranks waiting forever.
- Exit notices: a rank that exits (the end of its script, ``sys.exit(1)``, a ``return`` in the
  wrong branch) tells every other rank how many collectives it issued. A rank waiting in a later
  collective then knows it can never complete and aborts the job at once, naming the rank that
  left. The exiting rank waits, still watched, for every other rank's notice before MPI finalizes
  (``MPI_Finalize`` would wait for them anyway).

    # rank 0: y = x.mpi_all_reduce()             # rank 1 never calls it
    # JTMINI_MPI_DEBUG=1 -> both ranks: MPIMismatchError: ranks called different MPI operations:
    #     rank 0: mpi_all_reduce(op='add') float32 (3,)
    #     rank 1: program exit
    # otherwise, when rank 1 exits -> rank 0: mpi_all_reduce(...) cannot complete: rank 1 has exited ...
    # rank 1 frozen (SIGSTOP) -> within ~16 s, rank 0: ... cannot complete: rank 1 has sent no heartbeat ...
    # and if rank 1 goes on without exiting, after JTMINI_MPI_TIMEOUT s -> rank 0: ... did not complete
"""
import collections
import math
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


class _Fingerprints:
    """The collectives this rank issued, as a running hash: after collective k (from 0), the hash of
    (the value after k - 1, signature k). Two ranks with equal values at k issued, almost surely, the
    same calls up to k. A signature is ints and a shape (op, reduce op, root, dtype, shape), whose
    hashes Python does not randomise per process. The last HISTORY are kept, to name the first
    collective where two ranks differ. The main thread only appends each signature (``record``, a
    deque's append); the watchdog thread hashes them (``catch_up``), off the collective's path."""

    HISTORY = 1024        # about 4 s of ResNet-18 training at np 2 (43 collectives a step)
    SENT = 16             # collectives each heartbeat carries (it stays under the eager limit, 4 KB)
    DIMS = 6              # dims of a shape a heartbeat carries (more are cut: only the text suffers)
    ENTRY = 7 + DIMS      # index, value, op, reduce op, root, dtype, ndim, dims

    def __init__(self):
        self.count = 0
        self.value = 0
        self.history = collections.deque(maxlen=self.HISTORY)     # (index, value after it, signature)
        self.describe = repr          # signature -> text (runtime/mpi.py sets it)
        self._lock = threading.Lock()                # catch_up: the watchdog thread, or exit
        self._pending = collections.deque()          # signatures recorded, not hashed yet
        self.record = self._pending.append           # the main thread, before each collective's MPI call

    def keep_nothing(self):
        """No heartbeats (no ``MPI_THREAD_MULTIPLE``): nothing compares fingerprints, keep none."""
        self._pending = collections.deque(maxlen=0)
        self.record = self._pending.append

    def catch_up(self):
        """Hash the signatures recorded since the last call into the history."""
        with self._lock:
            while self._pending:
                signature = self._pending.popleft()
                self.value = hash((self.value, signature))
                self.history.append((self.count, self.value, signature))
                self.count += 1

    def encode(self, first=None, last=None):
        """``[count, entries...]`` as int64: the last SENT entries (what heartbeats carry), or those
        of collectives ``first`` to ``last`` still kept."""
        entries = list(self.history)                     # list() of a deque is atomic under the GIL
        entries = entries[-self.SENT:] if first is None else [e for e in entries if first <= e[0] <= last]
        rows = [[index, value, op, reduce_op, root, dtype, len(shape), *shape[:self.DIMS],
                 *[0] * (self.DIMS - len(shape[:self.DIMS]))]
                for index, value, (op, reduce_op, root, dtype, shape) in entries]
        return np.array([self.count] + [n for row in rows for n in row], np.int64)

    def decode(self, data):
        """``(count, [(index, value, signature)])`` from ``encode``'s output."""
        rows = data[1:].reshape(-1, self.ENTRY).tolist()
        return int(data[0]), [(r[0], r[1], (r[2], r[3], r[4], r[5], tuple(r[7:7 + min(r[6], self.DIMS)])))
                              for r in rows]

    def first_difference(self, theirs):
        """Compare ``theirs`` (decoded entries, oldest first) with this rank's at the same indices:
        ``(last index where they agree or None, None)``, or at the first where they differ
        ``(last index before it where they agree or None, (index, my signature, theirs))``."""
        mine = list(self.history)
        agreed = None
        for index, value, signature in theirs:
            k = index - mine[0][0] if mine else -1
            if 0 <= k < len(mine):
                if mine[k][1] != value:
                    return agreed, (index, mine[k][2], signature)
                agreed = index
        return agreed, None


fingerprints = _Fingerprints()


class _Peers:
    """Heartbeats and exit notices between ranks, on a communicator of their own (a duplicate of
    COMM_WORLD, so no receive of the user's can take one). Both carry the sender's last
    fingerprints; a notice also says that its sender exits. The watchdog thread sends and receives
    them, also while the main thread waits in an MPI call, which needs ``MPI_THREAD_MULTIPLE``
    (mpi4py asks for it): without it there are neither, and the watchdog's timeout is left. A rank
    that finds a difference past collectives it has not compared asks the other for its history
    of them (ASK, ANSWER), to name the first."""

    NOTICE, HEARTBEAT, ASK, ANSWER = 1, 2, 3, 4      # tags
    HEARTBEAT_S = 1.0             # how often a rank tells the others it is alive
    ASK_S = 2.0                   # how long an answer is waited for

    def __init__(self):
        self._comm = None
        self._lock = threading.Lock()      # the watchdog thread's MPI calls against closing at exit
        self._others = []
        self.heard = {}                    # rank -> monotonic time of its last message
        self.left = {}                     # rank -> collectives it issued before exiting (compared)
        self.counts = {}                   # rank -> collectives it had issued at its last heartbeat
        self._unread = {}                  # rank -> (tag, payload) received, not compared yet
        self._agreed = {}                  # rank -> last collective found equal to this rank's
        self._sending = {}                 # rank -> (request, payload) of the last heartbeat to it
        self._answers = {}                 # rank -> its answer to this rank's ASK
        self._answering = []               # (request, payload) of answers sent, kept alive
        self._next_beat = 0.0

    def open(self, comm):
        """Called by every rank as MPI starts (``MPI_Comm_dup`` is collective); heartbeats start."""
        from mpi4py import MPI
        if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
            fingerprints.keep_nothing()
            return
        dup = comm.Dup()
        self._others = [r for r in range(dup.Get_size()) if r != dup.Get_rank()]
        self.heard = dict.fromkeys(self._others, time.monotonic())
        self._comm = dup                   # last: the watchdog thread may be running already
        _watchdog.start()

    def tick(self):
        """Watchdog thread: send a heartbeat when one is due, and take in what the others sent."""
        with self._lock:
            if self._comm is None:
                return
            if time.monotonic() >= self._next_beat:
                self._next_beat = time.monotonic() + self.HEARTBEAT_S
                self._beat()
            self._receive()

    def _beat(self):
        """A heartbeat to every rank still here whose last one was delivered: a stopped rank takes
        none in, and they must not pile up."""
        payload = fingerprints.encode()
        for rank in self._others:
            sending = self._sending.get(rank)
            if rank not in self.left and (sending is None or sending[0].Test()):
                self._sending[rank] = (self._comm.Isend(payload, dest=rank, tag=self.HEARTBEAT), payload)

    def _receive(self):
        """Take in every message waiting: heartbeats and notices to compare, questions to answer."""
        from mpi4py import MPI
        status = MPI.Status()
        while self._comm.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
            rank, tag = status.Get_source(), status.Get_tag()
            data = np.empty(status.Get_count(MPI.INT64_T), np.int64)
            self._comm.Recv(data, source=rank, tag=tag)
            self.heard[rank] = time.monotonic()
            if tag == self.ASK:
                answer = fingerprints.encode(int(data[0]), int(data[1]))
                self._answering.append((self._comm.Isend(answer, dest=rank, tag=self.ANSWER), answer))
            elif tag == self.ANSWER:
                self._answers[rank] = data
            elif tag == self.NOTICE or self._unread.get(rank, (None,))[0] != self.NOTICE:
                self._unread[rank] = (tag, data)          # an unread notice outranks heartbeats

    def compare(self):
        """Watchdog thread: compare the fingerprints the others sent with this rank's; ends the job
        at the first collective where they differ."""
        while self._unread:
            rank, (tag, data) = self._unread.popitem()
            count, entries = fingerprints.decode(data)
            agreed, difference = fingerprints.first_difference(entries)
            agreed = _later(agreed, self._agreed.get(rank))
            if difference is not None:
                self._report(rank, agreed, difference)
            if agreed is not None:
                self._agreed[rank] = agreed
            (self.left if tag == self.NOTICE else self.counts)[rank] = count

    def _report(self, rank, agreed, difference):
        """End the job naming the first collective where this rank and ``rank`` differ; when some
        before ``difference`` were not compared, ``rank``'s history of them is asked for first."""
        index = difference[0]
        if agreed != index - 1:
            first = agreed + 1 if agreed is not None else max(0, index - fingerprints.HISTORY)
            earlier, found = fingerprints.first_difference(self._ask(rank, first, index))
            if found is not None:
                agreed, difference = _later(earlier, agreed), found
        abort(_mismatch_message(rank, difference, agreed))

    def _ask(self, rank, first, last):
        """``rank``'s entries for collectives ``first`` to ``last`` (its watchdog thread answers),
        or [] when no answer comes within ASK_S."""
        with self._lock:
            if self._comm is None:
                return []
            self._comm.Isend(np.array([first, last], np.int64), dest=rank, tag=self.ASK).Wait()
        deadline = time.monotonic() + self.ASK_S
        while time.monotonic() < deadline and rank not in self._answers:
            time.sleep(0.02)
            with self._lock:
                if self._comm is not None:
                    self._receive()          # answering the other's questions too: it may be asking
        answer = self._answers.pop(rank, None)
        return [] if answer is None else fingerprints.decode(answer)[1]

    def silent(self):
        """``{rank: seconds}`` of the ranks still here not heard from for longer than allowed."""
        now, limit = time.monotonic(), flags.mpi_heartbeat_timeout
        return {r: now - t for r, t in self.heard.items() if r not in self.left and now - t > limit}

    def behind(self, collective):
        """The ranks alive whose last heartbeat had not reached collective number ``collective``."""
        return {r: n for r, n in sorted(self.counts.items())
                if collective is not None and n <= collective and r not in self.left}

    def depart(self):
        """At exit (main thread): tell the others, then wait, watched, until every other rank has
        exited and its fingerprints matched; then stop, as MPI finalises next."""
        if self._comm is None:
            return
        from mpi4py import MPI
        fingerprints.catch_up()
        with self._lock:
            payload = fingerprints.encode()
            MPI.Request.Waitall([self._comm.Isend(payload, dest=r, tag=self.NOTICE) for r in self._others])
        def waiting():
            ranks = ", ".join(str(r) for r in self._others if r not in self.left)
            return f"program exit on rank {world.rank} (waiting for rank(s) {ranks} to finish)"
        with watch(waiting, seconds=math.inf):
            while len(self.left) < len(self._others):
                time.sleep(0.02)
        with self._lock:
            self._comm = None              # no MPI call from the watchdog thread from now on


peers = _Peers()


def _later(a, b):
    """The later of two collective indices, either of which may be None."""
    return b if a is None else a if b is None else max(a, b)


def _mismatch_message(rank, difference, agreed):
    index, mine, theirs = difference
    if agreed == index - 1 or index == 0:
        where = "the first where they differ"
    elif agreed is None:
        where = "the earliest both ranks still had to compare"
    else:
        where = f"they agreed up to collective {agreed + 1}"
    describe = fingerprints.describe
    return (f"ranks issued different collectives: collective {index + 1} was {describe(mine)} on rank "
            f"{world.rank} but {describe(theirs)} on rank {rank} ({where}). Every rank must issue the same "
            "collectives, with the same ops, roots, dtypes and shapes, in the same order (JTMINI_MPI_DEBUG=1 "
            "checks each call before it is made); aborting the MPI job")


class _Watchdog:
    """One daemon thread for the whole process: it polls the call in flight, and (``peers``) beats
    and compares fingerprints. Arming and disarming only set a field: no lock, and no thread woken
    per MPI call (on an oversubscribed node that wake-up competed with the ranks for the cores). The
    blocked MPI call runs in a ctypes (or mpi4py) call that releases the GIL, so this thread still
    gets to run and abort."""

    POLL_S = 0.25        # how late after its deadline a stuck call is reported, at most

    def __init__(self):
        self._armed = None           # (deadline, description, seconds, collective) while an MPI call is in flight
        self._thread = None
        self._start = threading.Lock()
        self.cpu_seconds = 0.0       # this thread's CPU time so far (tools/bench_mpi.py reports it)

    def start(self):
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, name="jtmini-mpi-watchdog", daemon=True)
                    self._thread.start()

    def arm(self, what, seconds, collective=None):
        """``collective``: the number of collectives this rank issued before this one, when it is one."""
        if self._thread is None:
            self.start()
        self._armed = (time.monotonic() + seconds, what, seconds, collective)

    def disarm(self):
        self._armed = None

    def _loop(self):
        while True:
            try:
                fingerprints.catch_up()
                peers.tick()
                peers.compare()
            except Exception as e:           # MPI itself failed: nothing can be trusted to end the job
                abort(f"the MPI watchdog failed: {type(e).__name__}: {e}; aborting the MPI job")
            armed = self._armed
            if armed is not None:
                problem = self._problem(armed)
                if problem is not None and self._armed is armed:
                    abort(f"{_text(armed[1])} {problem}; aborting the MPI job")
            self.cpu_seconds = time.thread_time()
            time.sleep(self.POLL_S)

    @staticmethod
    def _problem(armed):
        """Why the armed call cannot complete, or None while it may."""
        deadline, _, seconds, collective = armed
        for rank, issued in sorted(peers.left.items()):
            if collective is not None and issued <= collective:
                return (f"cannot complete: rank {rank} has exited after {issued} collective(s), and this is "
                        f"collective {collective + 1} of rank {world.rank}")
        silent = peers.silent()
        if silent:
            names = ", ".join(f"rank {r} has sent no heartbeat for {s:.0f} s" for r, s in sorted(silent.items()))
            return (f"cannot complete: {names} (stopped, or frozen holding the GIL: more than "
                    f"JTMINI_MPI_HEARTBEAT_TIMEOUT={flags.mpi_heartbeat_timeout:g} s)")
        if time.monotonic() > deadline:
            return f"did not complete within {seconds:g} s (JTMINI_MPI_TIMEOUT): {_who_is_behind(collective)}"
        return None


def _who_is_behind(collective):
    behind = peers.behind(collective)
    if not behind:
        return "another rank is probably not making this call (an MPI call inside `if jt.rank == ...`?)"
    names = ", ".join(f"rank {r} has issued {n}" for r, n in behind.items())
    return (f"{names} collective(s) and still answers, so it has not reached this one, collective "
            f"{collective + 1} of rank {world.rank} (an MPI call inside `if jt.rank == ...`, or a rank stuck "
            "outside MPI?)")


_watchdog = _Watchdog()


def watchdog_cpu_seconds():
    """CPU time the watchdog thread (polling, heartbeats, fingerprint comparisons) has used so far."""
    return _watchdog.cpu_seconds


class watch:
    """``with watch(what):`` aborts the job if the block has not finished within ``seconds``
    (default ``JTMINI_MPI_TIMEOUT``), as soon as another rank stops answering, or, for a collective
    (``collective``: how many this rank issued before it), as soon as a rank that will never make
    it has exited. ``what`` is the description, or a function that makes it (called only if the
    watchdog fires: a hot loop of small collectives should not format strings)."""

    def __init__(self, what, collective=None, seconds=None):
        self.what, self.collective, self.seconds = what, collective, seconds

    def __enter__(self):
        _watchdog.arm(self.what, flags.mpi_timeout if self.seconds is None else self.seconds, self.collective)

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


def error_message(code, what):
    """The error for MPI error ``code`` returned by ``what`` (collective ``index`` of this rank)."""
    from mpi4py import MPI
    text = f"{what} failed on rank {world.rank}: MPI error code {code} ({MPI.Get_error_string(code)})"
    if MPI.Get_error_class(code) != MPI.ERR_TRUNCATE:
        return text
    return (f"{text}: a rank received more data than this call expects, so the ranks probably issued "
            "different collectives here (one skipped a call or made an extra one) or this one with different "
            "shapes. Rerun with JTMINI_MPI_DEBUG=1: every call is then checked before it is made, and the "
            "rank that differs is named")


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
