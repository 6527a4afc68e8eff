"""jtmini.code_cache: generated kernel code kept on disk, keyed by the kernel's signature and
jtmini's own files; damaged files, keys that do not say everything and ops from outside jtmini
mean generating the code again."""
import os
import subprocess
import sys

import numpy as np
import pytest

import jtmini as jt
from jtmini import code_cache, codegen
from jtmini.flags import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODE = codegen.KernelCode("extern \"C\" void jt_kernel() {}\n", (1, 2), (3,), (4,))
KEY = ("cpu", ("map", ((("perm", (1, 0)),),)), (3, 4))

# Computes a few kernels' values; with argv[1] == "forbid", generating any code is an error.
CHILD = """
import sys, numpy as np, jtmini as jt
from jtmini import codegen
if sys.argv[1] == "forbid":
    codegen._Builder = None
x = jt.array(np.arange(12, dtype=np.float32).reshape(3, 4))
print(((x.transpose() * 2).exp().sum(dims=1) + x[:, 1:3].sum()).numpy().tolist())
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(flags, "cache_dir", str(tmp_path))
    return tmp_path


def stored(cache):
    return sorted((cache / "code").rglob("*.json"))


def test_code_is_stored_and_loaded_as_it_was(cache):
    assert code_cache.load(KEY, codegen.KernelCode) is None
    assert code_cache.store(KEY, CODE) is CODE
    assert len(stored(cache)) == 1
    assert code_cache.load(KEY, codegen.KernelCode) == CODE
    assert code_cache.load(("cpu", "another key", None), codegen.KernelCode) is None


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other fields"])
def test_a_damaged_file_is_a_miss(cache, damage):
    code_cache.store(KEY, CODE)
    (path,) = stored(cache)
    text = path.read_text()
    path.write_text({"garbage": "\x00{]", "truncated": text[:len(text) // 2], "other fields": '{"x": 1}'}[damage])
    assert code_cache.load(KEY, codegen.KernelCode) is None
    code_cache.store(KEY, CODE)
    assert code_cache.load(KEY, codegen.KernelCode) == CODE


def test_jtmini_code_of_another_version_does_not_meet_this_ones(cache, monkeypatch):
    code_cache.store(KEY, CODE)
    monkeypatch.setattr(code_cache, "_fingerprint", lambda: "an edited template")
    assert code_cache.load(KEY, codegen.KernelCode) is None


@pytest.mark.parametrize("unsaid", [object(), np.arange(5000), "x <= y"])
def test_keys_whose_repr_may_not_say_everything_are_not_kept(cache, unsaid):
    key = ("cpu", unsaid, None)
    assert code_cache.store(key, CODE) is CODE and stored(cache) == []
    assert code_cache.load(key, codegen.KernelCode) is None


def test_an_unwritable_folder_only_means_generating_again(cache):
    (cache / "code").write_text("a file where the folder would be")
    assert code_cache.store(KEY, CODE) is CODE
    assert code_cache.load(KEY, codegen.KernelCode) is None


def test_a_second_process_generates_no_code_and_computes_the_same(tmp_path):
    def run(mode):
        done = subprocess.run([sys.executable, "-c", CHILD, mode], cwd=REPO, capture_output=True, text=True,
                              timeout=300, env=dict(os.environ, JTMINI_CACHE_DIR=str(tmp_path), PYTHONPATH=REPO))
        return done
    first = run("allow")
    assert first.returncode == 0, first.stderr
    assert stored(tmp_path)
    second = run("forbid")
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(eval(first.stdout), np.exp(x.T * 2).sum(1) + x[:, 1:3].sum(), rtol=1e-6)


def test_kernels_of_ops_from_outside_jtmini_are_not_kept(cache, monkeypatch):
    sig = codegen.KernelSig("map", (codegen.InputSig("float32", 1),),
                            (codegen.NodeSig("exp", (), "float32", 1, (codegen.Ref("in", 0),)),), ())
    codegen._stored_or_built(("cpu", sig, None))
    assert len(stored(cache)) == 1
    spec = codegen.OPS["exp"]
    outside = type("Spec", (), {"infer": staticmethod(lambda *a: None), "__getattr__": lambda s, n: getattr(spec, n)})()
    outside.infer.__module__ = "my_ops"
    monkeypatch.setitem(codegen.OPS, "exp", outside)
    sig2 = sig._replace(ins=(codegen.InputSig("float64", 1),))
    codegen._stored_or_built(("cpu", sig2, None))
    assert len(stored(cache)) == 1


def test_write_atomically_leaves_the_old_file_on_failure(tmp_path):
    from jtmini.files import write_atomically
    target = tmp_path / "entry.json"
    write_atomically(str(target), "old")
    write_atomically(str(target), b"new bytes")
    assert target.read_bytes() == b"new bytes"
    with pytest.raises(TypeError):
        write_atomically(str(target), 12345)          # neither str nor bytes: nothing is replaced
    assert target.read_bytes() == b"new bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.json"]    # no temporary left
    write_atomically(str(target), "named", tmp=str(tmp_path / "entry.json.mine"))
    assert target.read_text() == "named" and len(list(tmp_path.iterdir())) == 1
