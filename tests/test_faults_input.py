"""Bad input gets a clear Python error naming what was wrong (shape, dtype, value, flag, path), at
the call that took it, never a silently wrong number or an unrelated error later: float labels
of losses, out-of-range classes, constants that do not fit their dtype, integer negative powers,
non-scalar losses (summed, as Jittor), flag values, layer arguments, data set sizes and unreadable checkpoints.
Behaviour is compared with numpy's and PyTorch's where they define one."""
import pickle
import re

import numpy as np
import pytest

import jtmini as jt
from jtmini import nn
from jtmini.dataset import Dataset
from jtmini.flags import (_SPECS, Flags, _check_amp_level, _check_amp_reg, _check_backend, _check_bool,
                          _check_compile_options, _check_count, _check_level, _check_memory_profiling,
                          _check_microseconds, _check_path, _check_seconds, _check_use_cuda, _check_vprefix)
from jtmini.nn import functional as F
from jtmini.persist import CheckpointError

torch = pytest.importorskip("torch")
TF = torch.nn.functional
WEIGHT = np.array([0.5, 2.0, 1.0], np.float32)


# --- 1. cross entropy: float labels, soft targets, label range ---------------------------------
@pytest.mark.parametrize("loss", [F.cross_entropy_loss, nn.CrossEntropyLoss(), F.nll_loss])
def test_float_labels_of_the_index_shape_are_a_type_error_naming_the_dtype(loss):
    with pytest.raises(TypeError, match="got dtype float32"):
        loss(jt.randn(4, 3), jt.array([0.0, 1.5, 2.0, 1.0]))
    with pytest.raises(TypeError, match="got dtype float64"):
        loss(jt.randn(4, 3), np.array([0.0, 1.0, 2.0, np.nan]))
    loss(jt.randn(4, 3), jt.array([0.0, 1.0, 2.0, 1.0]))          # whole numbers: Jittor's float labels


@pytest.mark.parametrize("kwargs", [{}, {"weight": WEIGHT}, {"label_smoothing": 0.2},
                                    {"reduction": "sum", "weight": WEIGHT}, {"reduction": "none"}])
def test_float_labels_of_the_logits_shape_are_class_probabilities_as_in_pytorch(rng, kwargs):
    logits = rng.standard_normal((4, 3)).astype(np.float32)
    p = rng.uniform(0.1, 1.0, (4, 3))
    p = (p / p.sum(1, keepdims=True)).astype(np.float32)
    x = jt.array(logits)
    t_kwargs = dict(kwargs, weight=torch.tensor(WEIGHT)) if "weight" in kwargs else kwargs
    got = nn.CrossEntropyLoss(**kwargs)(x, jt.array(p))
    tx = torch.tensor(logits, requires_grad=True)
    expected = torch.nn.CrossEntropyLoss(**t_kwargs)(tx, torch.tensor(p))
    np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    w = rng.uniform(0.5, 1.5, expected.shape).astype(np.float32)
    (expected * torch.tensor(w)).sum().backward()
    grad = jt.grad((got * jt.array(w)).sum(), x)
    np.testing.assert_allclose(grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_soft_targets_with_spatial_dims_match_pytorch(rng):
    logits = rng.standard_normal((2, 3, 4)).astype(np.float32)
    p = rng.uniform(0.1, 1.0, (2, 3, 4))
    p = (p / p.sum(1, keepdims=True)).astype(np.float32)
    got = F.cross_entropy_loss(jt.array(logits), jt.array(p), reduction="none")
    expected = TF.cross_entropy(torch.tensor(logits), torch.tensor(p), reduction="none")
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("labels", [np.array([0, 3, 1, 2]), np.array([0, -1, 1, 2])])
@pytest.mark.parametrize("as_var", [False, True])
def test_labels_out_of_range_are_a_value_error_naming_label_and_classes(labels, as_var):
    bad = labels[1]
    target = jt.array(labels) if as_var else labels
    for loss in (F.cross_entropy_loss, nn.CrossEntropyLoss(), F.nll_loss):
        with pytest.raises(ValueError, match=rf"label {bad} .*3 classes"):
            loss(jt.randn(4, 3), target)
    with pytest.raises(IndexError):          # PyTorch's kind of error for this, too
        TF.cross_entropy(torch.randn(4, 3), torch.tensor(labels))


def test_ignore_index_is_excepted_from_the_range_check(rng):
    logits, labels = rng.standard_normal((4, 3)).astype(np.float32), np.array([0, -100, 2, 1])
    got = F.cross_entropy_loss(jt.array(logits), jt.array(labels), ignore_index=-100)
    expected = TF.cross_entropy(torch.tensor(logits), torch.tensor(labels), ignore_index=-100)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match=r"label 3 .*3 classes"):     # ignored labels beside a bad one
        F.cross_entropy_loss(jt.array(logits), jt.array(np.array([0, -100, 3, 1])), ignore_index=-100)


def test_lazy_labels_are_not_computed_to_check_them():
    labels = jt.array(np.array([0, 1, 2, 1], np.int32)) + 0       # a node without a value yet
    loss = F.cross_entropy_loss(jt.randn(4, 3), labels)
    assert not labels.is_realized() and not loss.is_realized()


# --- 2. one_hot ----------------------------------------------------------------------------------
@pytest.mark.parametrize("values", [[0, 5, 1], [0, -2]])
@pytest.mark.parametrize("wrap", [np.array, jt.array, lambda v: (jt.array(v) + 0).sync()])
def test_one_hot_out_of_range_gives_a_zero_row_as_jittor_documents(values, wrap):
    rows = F.one_hot(wrap(np.array(values)), 3).numpy()
    want = np.array([[int(v == k) for k in range(3)] for v in values])
    np.testing.assert_array_equal(rows, want)


def test_one_hot_of_lazy_values_with_num_classes_given_does_not_compute_them():
    x = jt.array(np.array([0, 2, 1], np.int32)) + 0
    y = F.one_hot(x, 3)
    assert not x.is_realized()
    np.testing.assert_array_equal(y.numpy(), np.eye(3, dtype=np.int32)[[0, 2, 1]])


# --- 3. constants that do not fit their dtype -----------------------------------------------------
@pytest.mark.parametrize("value,dtype", [(2**40, "int32"), (-2**31 - 1, "int32"), (2**63, "int64"),
                                         (float("nan"), "int32"), (float("inf"), "int64")])
def test_full_refuses_values_that_do_not_fit_naming_value_and_dtype(value, dtype):
    with pytest.raises(OverflowError, match=rf"value {value!r} does not fit {dtype}"):
        jt.full((2,), value, dtype)


def test_full_keeps_values_that_fit():
    np.testing.assert_array_equal(jt.full((2,), 2**40, "int64").numpy(), [2**40, 2**40])
    np.testing.assert_array_equal(jt.full((2,), -2**31, "int32").numpy(), [-2**31, -2**31])
    assert jt.full((1,), float("-inf"), "float32").numpy()[0] == -np.inf
    with pytest.raises(TypeError, match="constant must be a real number, got 'x'"):
        jt.full((2,), "x", "float32")


def test_weak_scalars_that_do_not_fit_the_var_are_refused_as_numpy_does():
    x = jt.array(np.array([1, 2], np.int32))
    with pytest.raises(OverflowError, match="out of bounds for int32"):
        np.array([1, 2], np.int32) + 2**40
    with pytest.raises(OverflowError, match=r"value 1099511627776 does not fit int32"):
        x + 2**40
    with pytest.raises(OverflowError, match=r"does not fit int32"):
        2**40 * x


@pytest.mark.parametrize("data", [[2**70], 2**70, [2**63, -5], [[-2**64]], [2**64]])
def test_array_of_integers_past_int64_says_they_do_not_fit(data):
    with pytest.raises(OverflowError, match="does not fit int64"):
        jt.array(data)


def test_array_of_huge_integers_as_floats_and_of_objects():
    np.testing.assert_allclose(jt.array([2**70], "float64").numpy(), [2.0**70])
    with pytest.raises(TypeError, match="holding str"):
        jt.array(np.array([1, "a"], dtype=object))


# --- 4. integers to negative integer powers -------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_integer_to_a_negative_integer_power_is_refused_as_numpy_does(dtype):
    base = np.array([1, 2, 3]).astype(dtype)
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        base ** -1
    with pytest.raises(ValueError, match=r"integers to negative integer powers .*exponent -1"):
        jt.array(base) ** -1


def test_known_negative_integer_exponent_vars_are_refused_too():
    x = jt.array(np.array([1, 2, 3], np.int32))
    with pytest.raises(ValueError, match="exponent -2"):
        x ** jt.array(np.array([1, -2, 3], np.int32))
    with pytest.raises(ValueError, match="exponent -1"):
        x ** jt.full((3,), -1, "int32")
    with pytest.raises(ValueError, match="exponent -1"):
        2 ** jt.array(np.array([-1], np.int32))


def test_powers_that_are_defined_still_work():
    x = jt.array(np.array([1, 2, 3], np.int32))
    np.testing.assert_array_equal((x ** 2).numpy(), [1, 4, 9])
    np.testing.assert_allclose((x.float32() ** -1).numpy(), [1, 0.5, 1 / 3], rtol=1e-6)
    np.testing.assert_allclose((x ** -0.5).numpy(), np.array([1, 2, 3]) ** -0.5, rtol=1e-6)


# --- 5. non-scalar losses --------------------------------------------------------------------------
def _model_and_optimizer():
    model = nn.Linear(3, 2)
    return model, jt.optim.SGD(model.parameters(), 0.1)


@pytest.mark.parametrize("call", ["step", "backward"])
def test_optimizer_differentiates_a_non_scalar_loss_as_its_sum_as_jittor(call):
    # Jittor's optimizer.backward / step(loss) take a loss of any shape as its sum (PyTorch refuses)
    x = jt.randn(4, 3)
    model, opt = _model_and_optimizer()
    twin, twin_opt = _model_and_optimizer()
    twin.load_state_dict(model.state_dict())
    getattr(opt, call)(model(x))
    getattr(twin_opt, call)(twin(x).sum())
    if call == "backward":
        opt.step(), twin_opt.step()
    np.testing.assert_allclose(model.weight.numpy(), twin.weight.numpy(), rtol=1e-6)


def test_optimizer_takes_one_element_losses_and_refuses_non_vars():
    model, opt = _model_and_optimizer()
    before = model.weight.numpy()
    opt.step(model(jt.randn(4, 3)).sum().reshape(1))       # shape (1,): one element, as PyTorch
    assert not np.array_equal(model.weight.numpy(), before)
    with pytest.raises(TypeError, match="the loss must be a Var, got float"):
        opt.step(1.0)


# --- 6. flags ---------------------------------------------------------------------------------------
# per kind of flag (its checker): a value of the wrong type, and one of the right type out of range
# (for a bool flag, 2 is no bool: a TypeError too)
BAD_FLAG_VALUES = {_check_bool: ("yes", 2), _check_memory_profiling: ("yes", 2), _check_use_cuda: ("yes", 2), _check_count: ("x", 0), _check_seconds: ("10", -1.0),
                   _check_microseconds: ("10", -1.0),
                   _check_path: (3, ""), _check_backend: (3, "../cpu"), _check_amp_reg: ("x", 32),
                   _check_level: ("1", -1), _check_vprefix: (3, "var.py"),
                   _check_compile_options: ("x", {"compile_shapes": "1"}), _check_amp_level: ("x", 7)}


def test_every_flag_is_checked_by_a_checker_of_a_known_kind():
    assert {name: spec[2] for name, spec in _SPECS.items() if spec[2] not in BAD_FLAG_VALUES} == {}


@pytest.mark.parametrize("name", sorted(_SPECS))
def test_flags_refuse_bad_values_naming_flag_and_value_and_keep_theirs(name):
    wrong_type, out_of_range = BAD_FLAG_VALUES[_SPECS[name][2]]
    before = getattr(jt.flags, name)
    with pytest.raises(TypeError, match=rf"flag {name} .*got {re.escape(repr(wrong_type))}"):
        setattr(jt.flags, name, wrong_type)
    error = TypeError if isinstance(before, bool) else ValueError
    with pytest.raises(error, match=rf"flag {name} .*got {re.escape(repr(out_of_range))}"):
        setattr(jt.flags, name, out_of_range)
    with pytest.raises(TypeError, match=rf"flag {name} "):
        setattr(jt.flags, name, None)
    assert getattr(jt.flags, name) == before


def test_flags_accept_what_jittor_scripts_set():
    with jt.flag_scope(num_threads=np.int64(1), specialize_shapes=0, mpi_timeout=60):
        assert jt.flags.num_threads == 1 and jt.flags.specialize_shapes is False
        assert jt.flags.mpi_timeout == 60.0
    with jt.flag_scope(compile_options={"compile_shapes": 1}):
        assert jt.flags.compile_options == {"compile_shapes": 1}
        np.testing.assert_array_equal((jt.ones(3) * 2).numpy(), [2, 2, 2])


def test_a_bad_flag_environment_variable_is_named(monkeypatch):
    monkeypatch.setenv("JTMINI_NUM_THREADS", "many")
    with pytest.raises(ValueError, match="JTMINI_NUM_THREADS='many'"):
        Flags().num_threads
    monkeypatch.setenv("JTMINI_COMPILE_JOBS", "0")
    with pytest.raises(ValueError, match="JTMINI_COMPILE_JOBS='0'.*must be an int >= 1"):
        Flags().compile_jobs


# --- 7. layer arguments, input ranks, data set sizes -------------------------------------------
def test_sequential_refuses_non_layers_at_construction_naming_position_and_type():
    with pytest.raises(TypeError, match=r"layer '0' .*got int"):
        nn.Sequential(1, 2)
    with pytest.raises(TypeError, match=r"layer '1' .*got str"):
        nn.Sequential(nn.ReLU(), "relu")


def test_leaky_relu_refuses_a_slope_that_is_not_a_number_at_construction():
    with pytest.raises(ValueError, match=r"LeakyReLU: scale must be a real number, got 'x'"):
        nn.LeakyReLU("x")
    with pytest.raises(ValueError, match=r"LeakyReLU: negative_slope .*got '0.2'"):
        nn.LeakyReLU(0.1, negative_slope="0.2")
    np.testing.assert_allclose(nn.LeakyReLU(negative_slope=0.5)(jt.array([-2.0, 1.0])).numpy(), [-1.0, 1.0])
    # Jittor's modules from functions take the function's arguments at the call too
    np.testing.assert_allclose(nn.Leaky_relu()(jt.array([-2.0, 1.0]), 0.2).numpy(), [-0.4, 1.0])
    with pytest.raises(ValueError, match=r"LeakyReLU: scale must be a real number, got 'x'"):
        nn.LeakyReLU()(jt.array([-2.0]), "x")
    np.testing.assert_allclose(nn.Softmax()(jt.zeros(2, 4), 1).numpy(), np.full((2, 4), 0.25))


def test_batch_norm_layers_are_jittors_one_layer_for_any_rank():
    """Jittor's BatchNorm1d/2d/3d are BatchNorm: daVinci applies BatchNorm2d to a Linear's (N, C)
    output, and ``isinstance(m, nn.BatchNorm2d)`` in an init loop finds every one of them."""
    x = jt.randn(4, 3)
    np.testing.assert_allclose(nn.BatchNorm2d(3)(x).numpy(), nn.BatchNorm1d(3)(x).numpy(), rtol=1e-6)
    assert nn.BatchNorm1d(3)(jt.randn(2, 3, 2, 2)).shape == (2, 3, 2, 2)
    assert isinstance(nn.BatchNorm1d(3), nn.BatchNorm2d) and nn.BatchNorm3d is nn.BatchNorm
    with pytest.raises(ValueError, match=r"BatchNorm\(3\) needs float input of shape \(N, 3, ...\), got \(4, 2\)"):
        nn.BatchNorm2d(3)(jt.randn(4, 2))


def test_stack_of_mismatched_shapes_names_stack_and_the_shapes():
    with pytest.raises(ValueError, match=r"stack: .*\(2,\).*\(3,\)"):
        jt.stack([jt.ones(2), jt.ones(3)])


class _Numbers(Dataset):
    def __getitem__(self, i):
        return np.float32(i)


class _Negative(_Numbers):
    def __len__(self):
        return -1


def test_a_negative_total_len_is_refused_when_set():
    with pytest.raises(ValueError, match=r"_Numbers.total_len must be an int >= 0, got -1"):
        _Numbers().set_attrs(total_len=-1)
    with pytest.raises(TypeError, match=r"total_len must be an int >= 0, got 2.5"):
        _Numbers().total_len = 2.5
    with pytest.raises(ValueError, match=r"batch_size must be an int >= 1, got 0"):
        _Numbers(batch_size=0)


def test_a_negative_len_is_refused_naming_the_data_set():
    with pytest.raises(ValueError, match=r"_Negative.__len__\(\) must be an int >= 0, got -1"):
        iter(_Negative()).__next__()
    batches = list(_Numbers(batch_size=2, keep_numpy_array=True).set_attrs(total_len=3))
    assert [b.tolist() for b in batches] == [[0, 1], [2]]


# --- 8. unreadable checkpoints -----------------------------------------------------------------------
def _bad_files(tmp_path):
    good = tmp_path / "good.pkl"
    jt.save({"weight": np.ones((2, 3), np.float32), "bias": np.zeros(2, np.float32)}, good)
    data = good.read_bytes()
    files = {"empty": b"", "text": b"weight: 1\nbias: 2\n", "truncated": data[:len(data) // 2],
             "garbage": bytes(range(256))}
    for name, content in files.items():
        (tmp_path / f"{name}.pkl").write_bytes(content)
    return [tmp_path / f"{name}.pkl" for name in files]


@pytest.mark.parametrize("loader", ["jt.load", "nn.load", "Module.load", "Optimizer.load"])
def test_unreadable_checkpoints_raise_checkpoint_error_naming_the_path(tmp_path, loader):
    model = nn.Linear(3, 2)
    load = {"jt.load": jt.load, "nn.load": nn.load, "Module.load": model.load,
            "Optimizer.load": jt.optim.SGD(model.parameters(), 0.1).load}[loader]
    for path in _bad_files(tmp_path):
        with pytest.raises(CheckpointError, match=str(path)):
            load(path)
        with pytest.raises(ValueError):                # CheckpointError is one
            load(str(path))


def test_a_checkpoint_that_is_not_a_dict_is_refused_by_module_load(tmp_path):
    path = tmp_path / "list.pkl"
    path.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(CheckpointError, match=rf"{path}: holds a list, not the dict Linear.load needs"):
        nn.Linear(3, 2).load(path)
    assert jt.load(path) == [1, 2, 3]
