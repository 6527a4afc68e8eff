"""jtmini's log: the "jtmini" logger of the standard ``logging`` module, printed as Jittor prints
(``[i jtmini] message``), and Jittor's ``jt.LOG`` and ``jt.log_capture_scope`` on top of it.

    >>> jt.LOG.i("loaded", 3, "files")          # [i jtmini] loaded 3 files
    >>> jt.LOG.v("detail")                      # shown when jt.flags.log_v >= 1
    >>> with jt.log_capture_scope(log_v=1) as logs:
    ...     jt.LOG.v("x")
    >>> logs[0]["msg"], logs[0]["level"], logs[0]["verbose"]
    ('x', 'i', 1)
"""
import contextlib
import logging
import os
import sys

from .flags import flag_scope, flags

# Jittor's verbose levels: LOG.v is 1, LOG.vv 10, LOG.vvv 100 (shown when flags.log_v reaches them)
_VERBOSE = {"v": 1, "vv": 10, "vvv": 100}
_LEVELS = {"i": logging.INFO, "w": logging.WARNING, "e": logging.ERROR, "f": logging.CRITICAL}
_captures = []          # the record lists of the log_capture_scope blocks now open


class _JittorStyle(logging.Formatter):
    """``[i jtmini] message``, with the level's first letter: i, w, e as Jittor prints them."""

    def format(self, record):
        return f"[{record.levelname[0].lower()} jtmini] {record.getMessage()}"


def logger():
    """The "jtmini" logger, set up on first use: stderr in Jittor's style, and under mpirun only
    rank 0 at INFO (N identical lines per event help nobody)."""
    log = logging.getLogger("jtmini")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_JittorStyle())
        # Jittor's log_silent: info and warnings are not printed (errors still are)
        handler.addFilter(lambda record: not (flags.log_silent and record.levelno < logging.ERROR))
        log.addHandler(handler)
        from . import world
        log.setLevel(logging.INFO if world.rank == 0 else logging.WARNING)
        log.propagate = False  # a configured root logger would print the line a second time
    return log


def _caller():
    frame = sys._getframe(3)
    return os.path.basename(frame.f_code.co_filename), frame.f_lineno


def _verbosity(file, line):
    """The verbosity at ``file:line``: the level of the longest prefix of it in flags.log_vprefix
    ("executor.py=10"; a prefix ending in "$" must match all of it), else flags.log_v."""
    if not flags.log_vprefix:
        return flags.log_v
    where, best, level = f"{file}:{line}", -1, flags.log_v
    for part in filter(None, flags.log_vprefix.split(",")):
        prefix, _, value = part.partition("=")
        exact = prefix.endswith("$")
        prefix = prefix.rstrip("$")
        if (where == prefix if exact else where.startswith(prefix)) and len(prefix) > best:
            best, level = len(prefix), int(value)
    return level


def _emit(level, verbose, args):
    """Log ``args`` joined by spaces at ``level`` (i/w/e/f); verbose messages only when
    ``flags.log_v`` reaches ``verbose``. Open capture scopes receive every message shown."""
    file, line = _caller()
    if verbose and _verbosity(file, line) < verbose:
        return
    msg = " ".join(str(a) for a in args)
    for records in _captures:
        records.append({"level": level, "verbose": verbose, "file": file, "lineno": line, "msg": msg})
    if not _captures:
        logger().log(_LEVELS[level], msg)
    if level == "f":
        raise RuntimeError(msg)


class _Log:
    """Jittor's ``jt.LOG``: ``i`` (info), ``w`` (warning), ``e`` (error), ``f`` (fatal: logs, then
    raises RuntimeError), and the verbose ``v``, ``vv``, ``vvv`` shown by ``flags.log_v``."""

    def i(self, *args):
        _emit("i", 0, args)

    def w(self, *args):
        _emit("w", 0, args)

    def e(self, *args):
        _emit("e", 0, args)

    def f(self, *args):
        _emit("f", 0, args)

    def v(self, *args):
        _emit("i", _VERBOSE["v"], args)

    def vv(self, *args):
        _emit("i", _VERBOSE["vv"], args)

    def vvv(self, *args):
        _emit("i", _VERBOSE["vvv"], args)


LOG = _Log()


@contextlib.contextmanager
def log_capture_scope(**flag_changes):
    """Collect the messages logged inside the block, instead of printing them, as a list of dicts
    (``level``, ``verbose``, ``file``, ``lineno``, ``msg``); keyword arguments set flags for the
    block (``log_v=1`` to keep verbose messages)."""
    records = []
    with flag_scope(**flag_changes):
        _captures.append(records)
        try:
            yield records
        finally:
            _captures.remove(records)
