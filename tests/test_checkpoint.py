"""``jt.save`` / ``jt.load``: Vars saved as arrays through nested containers; loading reads only
what a checkpoint holds and never runs code named by the file (a pickle can name any function)."""
import collections
import os
import pickle

import numpy as np
import pytest

import jtmini as jt
from jtmini import nn


def test_vars_in_nested_containers_come_back_as_arrays(tmp_path, rng):
    value = rng.standard_normal((3, 4)).astype("float32")
    state = {"w": jt.array(value), "layers": [jt.array([1, 2]), (jt.ones(2), 3.5)], "step": 7, "name": "x",
             "none": None, "scalar": np.float32(2.0), "set": {1, 2}}
    jt.save(state, tmp_path / "ckpt.pkl")
    back = jt.load(tmp_path / "ckpt.pkl")
    np.testing.assert_array_equal(back["w"], value)
    assert back["w"].dtype == np.float32 and back["layers"][0].dtype == np.int64
    assert isinstance(back["layers"][1], tuple) and back["layers"][1][1] == 3.5
    assert (back["step"], back["name"], back["none"], back["scalar"], back["set"]) == (7, "x", None, 2.0, {1, 2})


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_files_pickled_as_jittor_does_load(tmp_path, protocol):
    saved = collections.OrderedDict(weight=np.arange(6.0).reshape(2, 3).T, bias=np.float64(1.5), n=np.int64(3))
    with open(tmp_path / "jittor.pkl", "wb") as f:
        pickle.dump(saved, f, protocol=protocol)
    back = jt.load(tmp_path / "jittor.pkl")
    np.testing.assert_array_equal(back["weight"], saved["weight"])
    assert back["bias"] == 1.5 and back["n"] == 3 and list(back) == ["weight", "bias", "n"]


class _RunsAShellCommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_pickle_that_names_a_function_is_refused_and_not_run(tmp_path):
    marker, path = tmp_path / "pwned", tmp_path / "evil.pkl"
    with open(path, "wb") as f:
        pickle.dump({"weight": np.ones(2), "x": _RunsAShellCommand(marker)}, f)
    with pytest.raises(ValueError, match=f"{path}: refusing to load posix.system"):
        jt.load(path)
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="refusing to load posix.system"):
        model.load(str(path))
    assert not marker.exists()


def test_a_truncated_or_foreign_file_is_a_clear_error(tmp_path):
    jt.save({"w": jt.ones(1000)}, tmp_path / "good.pkl")
    data = (tmp_path / "good.pkl").read_bytes()
    (tmp_path / "cut.pkl").write_bytes(data[: len(data) // 2])
    (tmp_path / "text.pkl").write_text("not a pickle")
    for name in ("cut.pkl", "text.pkl"):
        with pytest.raises(ValueError, match=f"{tmp_path / name}: not a readable checkpoint"):
            jt.load(tmp_path / name)


def test_module_round_trip_through_a_file(tmp_path, rng):
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    model.save(str(tmp_path / "m.pkl"))
    other = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    other.load(str(tmp_path / "m.pkl"))
    for (name, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def test_load_parameters_skips_what_does_not_fit_as_jittor_does(tmp_path, rng):
    """Fine-tuning: a checkpoint whose head has another shape, plus a stray entry, loads the rest
    with one warning naming what was skipped (Jittor's load_parameters and Module.load)."""
    torch = pytest.importorskip("torch")
    source = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 10))
    source.save(str(tmp_path / "pre.pkl"))
    target = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    head = target[2].weight.numpy()
    with pytest.warns(UserWarning, match=r"2 of 4 entries not loaded: 2.weight has shape \(10, 4\), the module "
                                         r"expects \(2, 4\); 2.bias has shape"):
        target.load(str(tmp_path / "pre.pkl"))
    np.testing.assert_array_equal(target[0].weight.numpy(), source[0].weight.numpy())
    np.testing.assert_array_equal(target[2].weight.numpy(), head)
    ref = torch.nn.Linear(3, 4)          # a PyTorch state dict (tensors that require grad) loads too
    state = dict(ref.state_dict(keep_vars=True), stray=torch.zeros(1))
    layer = nn.Linear(3, 4)
    with pytest.warns(UserWarning, match="stray names no Var of the module"):
        layer.load_parameters(state)
    np.testing.assert_array_equal(layer.weight.numpy(), ref.weight.detach().numpy())
    with pytest.raises(KeyError, match="unexpected"):        # PyTorch's check, when asked for
        nn.Linear(3, 4).load_state_dict(state, strict=True)
    with pytest.warns(UserWarning, match="stray names no Var of the module"):
        other = nn.Linear(3, 4).load_state_dict(state)        # Jittor's: load_parameters
    np.testing.assert_array_equal(other.weight.numpy(), ref.weight.detach().numpy())


def test_pytorch_zip_checkpoints_load_as_arrays_without_running_code(tmp_path, rng):
    """``torch.save`` files (zip format): tensors of every stored dtype come back as numpy arrays,
    views (offsets, strides) of a shared storage as their own values, Parameters as their data."""
    torch = pytest.importorskip("torch")
    base = torch.tensor(rng.standard_normal((4, 5)))
    state = collections.OrderedDict(
        w=torch.tensor(rng.standard_normal((3, 2)), dtype=torch.float32), d=base,
        t=base.t(), s=base[1:3, ::2], i=torch.arange(6, dtype=torch.int64).reshape(2, 3),
        b=torch.tensor([True, False]), h=torch.tensor([1.5, -2.0], dtype=torch.float16),
        u=torch.tensor([255, 0], dtype=torch.uint8), e=torch.zeros(0, 3), z=torch.tensor(3.25),
        p=torch.nn.Parameter(torch.ones(2)), nested=[torch.ones(1), {"k": 7}])
    torch.save(state, tmp_path / "state.pth")
    back = jt.load(tmp_path / "state.pth")
    for key in ("w", "d", "t", "s", "i", "b", "h", "u", "e", "z"):
        want = state[key].numpy()
        assert back[key].dtype == want.dtype and back[key].shape == want.shape, key
        np.testing.assert_array_equal(back[key], want)
    np.testing.assert_array_equal(back["p"], [1.0, 1.0])
    np.testing.assert_array_equal(back["nested"][0], [1.0])
    assert back["nested"][1] == {"k": 7}

    marker = tmp_path / "ran"

    class Evil(torch.nn.Module):
        def __reduce__(self):
            return os.system, (f"touch {marker}",)
    torch.save({"m": Evil()}, tmp_path / "evil.pth")
    with pytest.raises(ValueError, match="refusing to load .*system"):         # CheckpointError
        jt.load(tmp_path / "evil.pth")
    assert not marker.exists()


def test_a_module_loads_a_pytorch_state_dict_file(tmp_path, rng):
    torch = pytest.importorskip("torch")
    ref = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    ref.train()
    ref(torch.tensor(rng.standard_normal((8, 3)), dtype=torch.float32))      # running stats move
    torch.save(ref.state_dict(), tmp_path / "ref.pth")
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    net.load(tmp_path / "ref.pth")                                           # num_batches_tracked skipped
    ref.eval(), net.eval()
    x = rng.standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(net(jt.array(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
