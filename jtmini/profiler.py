"""``jt.profile_scope()``: where the time of the code inside goes, per kernel, library call,
collective and view, and how much of it is host (Python) work between them.

    >>> with jt.profile_scope(trace="step.json") as report:
    ...     optimizer.step(model(x).sum())
    >>> report.rows[0]                  # the costliest entry: (name, kind, calls, seconds)

On leaving the scope a table is printed (rank 0 only under mpirun): each entry's calls, total and
mean time and share of the scope's wall time, costliest first, then the host time, the scope's
wall time less the steps'. With ``trace`` a Chrome trace (JSON) is written as well: open it in
https://ui.perfetto.dev or chrome://tracing; each Python thread that computed Vars is a track,
with each ``realize`` (planning included) and, inside it, each step.

``jt.profile_mark(name)`` around part of the code adds a row of kind "mark" with that part's
wall time.

A kernel is named by its ops (``add relu sum``); times are wall-clock on the host thread that
launched the step (a GPU step is timed to its launch, not its completion). A repeated step runs as
it would outside the scope: from its prepared program, whose launch table's runner stamps each
entry (``runtime/cpu_table.py``). Nothing is recorded outside a scope, and the executor's loop
pays one test per step for the possibility.
"""
import collections
import contextlib
import json
import os
import threading
import time
import typing

from . import world
from .flags import flag_scope

_NAME_CHARS = 60          # the table cuts a long fused kernel's name to this many characters
active = None             # the _Recorder of the open scope, read by the executor


class _Recorder:
    def __init__(self):
        self.start = time.perf_counter()
        # (name, kind) -> [calls, seconds, shortest, longest]
        self.totals = collections.defaultdict(lambda: [0, 0.0, float("inf"), 0.0])
        self.events = []
        self.lock = threading.Lock()

    def record(self, name, kind, began, ended, in_steps=True):
        """One timed span (``time.perf_counter`` readings); steps count towards the table."""
        with self.lock:
            if in_steps:
                total = self.totals[(name, kind)]
                took = ended - began
                total[0] += 1
                total[1] += took
                total[2] = min(total[2], took)
                total[3] = max(total[3], took)
            self.events.append({"name": name, "cat": kind, "ph": "X", "pid": world.rank,
                                "tid": threading.get_ident(), "ts": (began - self.start) * 1e6,
                                "dur": (ended - began) * 1e6})


class Row(typing.NamedTuple):
    """One entry of a profile: a step's name and kind, how often it ran, and its times in seconds."""
    name: str
    kind: str
    calls: int
    seconds: float
    shortest: float
    longest: float


class Report:
    """What a ``profile_scope`` measured: ``rows`` as ``(name, kind, calls, seconds)``, costliest
    first; ``wall`` and ``host`` seconds (host: the wall time not spent in steps).

    It is also Jittor's report, a list of rows of strings: ``report[0]`` is the header
    ``["Name", "Kind", "Count", "TotalTime", "AvgTime", "MinTime", "MaxTime"]`` and each further
    row one entry, times in nanoseconds as Jittor gives them; so ``len(report)`` is one more than
    the number of distinct steps run. (Jittor's second column is the kernel's source file and its
    rows go on with memory traffic, which jtmini does not measure.) There a kernel of several ops
    is named as Jittor names a fused op, by its ops' part of the jit key (``jittor_name``).

    >>> with jt.profile_scope(show=False) as rep:
    ...     _ = (jt.ones(10) - 1).sync()
    >>> len(rep), rep.rows[0][0], rep[1][0], float(rep[1][3]) > 0
    (2, 'const const sub', '«opkey0:const«opkey1:const«opkey2:sub', True)
    """
    HEADER = ["Name", "Kind", "Count", "TotalTime", "AvgTime", "MinTime", "MaxTime"]

    def __init__(self):
        self.rows, self.wall, self.host, self.entries = [], 0.0, 0.0, []

    def _jittor_rows(self):
        ns = _nanoseconds
        return [self.HEADER] + [[jittor_name(e.name, e.kind), e.kind, str(e.calls), ns(e.seconds),
                                 ns(e.seconds / e.calls), ns(e.shortest), ns(e.longest)] for e in self.entries]

    def __len__(self):
        return 1 + len(self.entries)

    def __getitem__(self, index):
        return self._jittor_rows()[index]

    def __iter__(self):
        return iter(self._jittor_rows())

    def table(self):
        """The report as text, one line per entry."""
        lines = [f"{'seconds':>9} {'share':>6} {'calls':>7} {'mean ms':>9}  {'kind':<10} name"]
        for name, kind, calls, seconds in self.rows:
            name = name if len(name) <= _NAME_CHARS else name[:_NAME_CHARS - 3] + "..."
            share = seconds / self.wall if self.wall else 0.0
            lines.append(f"{seconds:9.4f} {share:6.1%} {calls:7d} {seconds / calls * 1e3:9.3f}  {kind:<10} {name}")
        lines.append(f"{self.host:9.4f} {self.host / self.wall if self.wall else 0:6.1%} {'':7} {'':9}  "
                     f"{'host':<10} between steps: building graphs and gradients, planning, compiling")
        lines.append(f"{self.wall:9.4f} {'100.0%':>6} {'':7} {'':9}  {'wall':<10} the whole scope")
        return "\n".join(lines)


def _nanoseconds(seconds):
    return f"{seconds * 1e9:.0f}"


def step_name(step):
    """How a profile names a schedule step: a kernel by its ops, others by their op."""
    nodes = getattr(step, "nodes", None)
    return " ".join(v.op for v in nodes) if nodes else step.root.op


# the kinds of generated kernels (schedule.ROOT_KINDS); library calls, views, collectives are one op
_KERNEL_KINDS = ("map", "reduce", "argreduce", "scatter")


def jittor_name(name, kind):
    """A step's name as Jittor's report gives it: a kernel of several ops is a fused op, named by
    the ``«opkeyN:op`` part of its jit key (so Jittor code can tell fused kernels by the leading
    ``«``); a kernel of one op and any other step keep their op's name.

    >>> jittor_name("reindex mul sum", "reduce"), jittor_name("matmul", "library")
    ('«opkey0:reindex«opkey1:mul«opkey2:sum', 'matmul')
    """
    ops = name.split()
    if kind not in _KERNEL_KINDS or len(ops) < 2:
        return name
    return "".join(f"«opkey{k}:{op}" for k, op in enumerate(ops))


@contextlib.contextmanager
def profile_scope(warmup=0, rerun=0, trace=None, show=True, **flag_changes):
    """Profile the steps computed inside the ``with`` block (see the module doc); ``trace``: a
    path for a Chrome trace JSON; ``show``: print the table (rank 0). Yields a ``Report``, filled
    when the block ends. Scopes do not nest. As in Jittor, other keywords are flags set for the
    block (``jt.profile_scope(num_threads=1)``); ``warmup`` and ``rerun``, Jittor's counts of
    extra runs of each op, are accepted and not used: each step is timed as it runs, once (a
    rerun would apply an in-place update, an optimizer's, again).

    >>> with jt.profile_scope(show=False) as report:
    ...     _ = (jt.array(np.ones(100)) * 2).sum().sync()
    >>> report.rows[0][:3]
    ('const mul reduce', 'reduce', 1)
    """
    global active
    if active is not None:
        raise RuntimeError("jt.profile_scope: a profile scope is open already (scopes do not nest)")
    for name, count in (("warmup", warmup), ("rerun", rerun)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"jt.profile_scope: {name}={count!r} must be an int >= 0 (a count of runs); "
                             f"give the trace path as trace=")
    recorder = active = _Recorder()
    report = Report()
    try:
        with flag_scope(**flag_changes):
            yield report
    finally:
        active = None
        _fill(report, recorder, time.perf_counter() - recorder.start)
        if trace is not None:
            _write_trace(os.fspath(trace), recorder.events)
        if show and world.rank == 0:
            print(report.table())


@contextlib.contextmanager
def profile_mark(mark_name):
    """Jittor's ``jt.profile_mark(name)``: inside a ``profile_scope``, the block's wall time is a
    row of kind "mark" named ``mark_name`` (and a span in the trace), steps and host work inside
    it included; outside a scope it does nothing.

    >>> with jt.profile_scope(show=False) as rep:
    ...     with jt.profile_mark("forward"):
    ...         _ = (jt.ones(10) * 2).sync()
    >>> [row[0] for row in rep.rows if row[1] == "mark"]
    ['forward']
    """
    if not isinstance(mark_name, str):
        raise TypeError(f"jt.profile_mark: the mark's name must be a str, got {type(mark_name).__name__}")
    recorder, began = active, time.perf_counter()
    try:
        yield
    finally:
        if recorder is not None and recorder is active:
            recorder.record(mark_name, "mark", began, time.perf_counter())


def _fill(report, recorder, wall):
    entries = [Row(name, kind, *total) for (name, kind), total in recorder.totals.items()]
    report.entries = sorted(entries, key=lambda e: -e.seconds)
    rows = report.rows = [tuple(e[:4]) for e in report.entries]
    report.wall = wall
    # a mark spans steps and host work alike: it is no part of either
    report.host = max(0.0, wall - sum(row[3] for row in rows if row[1] != "mark"))


def _write_trace(path, events):
    """The Chrome trace event format: a JSON object with ``traceEvents``, times in microseconds."""
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
