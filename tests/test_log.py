"""jt.LOG, jt.log_capture_scope and flags.log_v, as Jittor's."""
import subprocess
import sys

import pytest

import jtmini as jt


def test_capture_keeps_what_the_verbosity_shows():
    with jt.log_capture_scope(log_v=1) as logs:
        jt.LOG.v("one")
        jt.LOG.vv("ten")            # log_v 1 < 10: not shown, not captured
        jt.LOG.i("info", 3)
        jt.LOG.w("warn")
        jt.LOG.e("err")
    assert [(r["level"], r["verbose"], r["msg"]) for r in logs] == [
        ("i", 1, "one"), ("i", 0, "info 3"), ("w", 0, "warn"), ("e", 0, "err")]
    assert logs[0]["file"] == "test_log.py" and logs[0]["lineno"] > 0
    assert jt.flags.log_v == 0                       # restored after the block


def test_verbose_levels_and_nesting():
    with jt.log_capture_scope(log_v=100) as outer:
        with jt.log_capture_scope() as inner:
            jt.LOG.vvv("deep")
    assert [r["msg"] for r in outer] == [r["msg"] for r in inner] == ["deep"]
    with jt.log_capture_scope() as quiet:
        jt.LOG.v("hidden")
    assert quiet == []


def test_fatal_logs_then_raises():
    with jt.log_capture_scope() as logs, pytest.raises(RuntimeError, match="broken 7"):
        jt.LOG.f("broken", 7)
    assert logs[0]["level"] == "f"


def test_log_v_is_checked():
    with pytest.raises(ValueError, match="log_v"):
        jt.flags.log_v = -1
    with pytest.raises(TypeError, match="log_v"):
        jt.flags.log_v = "1"


def test_messages_print_in_jittor_style_and_log_v_comes_from_the_environment():
    code = "import jtmini as jt; jt.LOG.i('hello'); jt.LOG.v('verbose'); jt.LOG.w('careful')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "JTMINI_LOG_V": "1"})
    lines = [line for line in out.stderr.splitlines() if "jtmini]" in line]
    assert "[i jtmini] hello" in lines and "[i jtmini] verbose" in lines and "[w jtmini] careful" in lines
