"""Recurrent cells and layers against PyTorch CPU (a test-only oracle) with the same weights:
outputs, final states, and the gradients with respect to the input, the initial state and every
weight; parameter names, shapes and init; dropout between layers; the errors bad arguments raise.
Sizes are few and small (input 4, hidden 4, 3 steps, batch 2) and the configurations few: every
new shape, and every step offset, compiles kernels."""
import math

import numpy as np
import pytest

import jtmini as jt
from jtmini.nn.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell

torch = pytest.importorskip("torch")
TOL = dict(rtol=1e-5, atol=1e-6)
GRAD_TOL = dict(rtol=1e-4, atol=1e-5)
I, H, T, N = 4, 4, 3, 2


def twins(make, make_ref):
    """A jtmini layer and a float64 PyTorch twin with the same (float32) weights, loaded by name
    from the PyTorch layer's state_dict, after checking names and order agree."""
    layer, ref = make(), make_ref()
    assert [name for name, _ in layer.named_parameters()] == [name for name, _ in ref.named_parameters()]
    layer.load_state_dict({k: v.numpy() for k, v in ref.state_dict().items()})
    return layer, ref.double()


def flat(result):
    """The tensors of a result, nested tuples ((output, (h_n, c_n))) flattened in order."""
    return [t for part in result for t in flat(part)] if isinstance(result, tuple) else [result]


def check_against_torch(layer, ref, x, states, rng):
    """``layer(x, hx)`` in float32 matches ``ref`` (float64) in every result and in the gradients
    of a random weighted sum of the results with respect to x, each initial state and each
    parameter. ``states`` is [] (no hx), [h0] or [h0, c0]."""
    lstm = isinstance(ref, (torch.nn.LSTM, torch.nn.LSTMCell))
    x, states = np.float32(x), [np.float32(s) for s in states]
    jx, js = jt.array(x), [jt.array(s) for s in states]
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ts = [torch.tensor(s, dtype=torch.float64, requires_grad=True) for s in states]
    hx = (tuple(js) if lstm else js[0]) if states else None
    thx = (tuple(ts) if lstm else ts[0]) if states else None
    got, expected = flat(layer(jx, hx)), flat(ref(tx, thx))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == tuple(e.shape) and g.dtype == "float32"
        np.testing.assert_allclose(g.numpy(), e.detach().numpy(), **TOL)
    weights = [rng.uniform(0.5, 1.5, tuple(e.shape)) for e in expected]
    loss = sum((g * jt.array(np.float32(w))).sum() for g, w in zip(got, weights))
    t_loss = sum((e * torch.tensor(w)).sum() for e, w in zip(expected, weights))
    names = [name for name, _ in ref.named_parameters()]
    grads = jt.grad(loss, [jx] + js + layer.parameters())
    t_grads = torch.autograd.grad(t_loss, [tx] + ts + list(ref.parameters()))
    for name, g, e in zip(["input"] + ["h0", "c0"][:len(states)] + names, grads, t_grads):
        np.testing.assert_allclose(g.numpy(), e.numpy(), err_msg=f"gradient of {name}", **GRAD_TOL)


def layers(jt_cls, torch_cls, **kwargs):
    """``twins`` of the sequence layers ``jt_cls(I, H, **kwargs)`` and ``torch_cls(I, H, **kwargs)``."""
    return twins(lambda: jt_cls(I, H, **kwargs), lambda: torch_cls(I, H, **kwargs))


# --- sequence layers ---------------------------------------------------------------------------
def test_gru_two_layers_bidirectional_batch_first(rng):
    """h0 stays (num_layers * directions, batch, hidden) with batch_first, as in PyTorch."""
    layer, ref = layers(GRU, torch.nn.GRU, num_layers=2, bidirectional=True, batch_first=True)
    check_against_torch(layer, ref, rng.standard_normal((N, T, I)), [rng.standard_normal((4, N, H))], rng)


def test_lstm_two_layers_bidirectional_time_major(rng):
    layer, ref = layers(LSTM, torch.nn.LSTM, num_layers=2, bidirectional=True)
    check_against_torch(layer, ref, rng.standard_normal((T, N, I)), [], rng)


def test_rnn_tanh_two_layers_bidirectional_with_initial_state(rng):
    """Each layer and direction starts from its own row of h0: layer * 2 + direction."""
    layer, ref = layers(RNN, torch.nn.RNN, num_layers=2, bidirectional=True)
    assert layer.nonlinearity == "tanh" and layer.mode == "RNN_TANH"
    check_against_torch(layer, ref, rng.standard_normal((T, N, I)), [rng.standard_normal((4, N, H))], rng)


def test_rnn_relu_batch_first_without_bias(rng):
    layer, ref = layers(RNN, torch.nn.RNN, nonlinearity="relu", batch_first=True, bias=False)
    assert layer.bias is False and [n for n, _ in layer.named_parameters()] == ["weight_ih_l0", "weight_hh_l0"]
    check_against_torch(layer, ref, rng.standard_normal((N, T, I)), [rng.standard_normal((1, N, H))], rng)


def test_unbatched_lstm(rng):
    """A 2-D input (seq_len, input_size) with 2-D states (num_layers * directions, hidden);
    batch_first does not apply to it."""
    layer, ref = layers(LSTM, torch.nn.LSTM, batch_first=True)
    states = [rng.standard_normal((1, H)), rng.standard_normal((1, H))]
    check_against_torch(layer, ref, rng.standard_normal((T, I)), states, rng)


def test_unbatched_one_step_rnn(rng):
    layer, ref = layers(RNN, torch.nn.RNN)
    check_against_torch(layer, ref, rng.standard_normal((1, I)), [rng.standard_normal((1, H))], rng)


# --- cells -------------------------------------------------------------------------------------
CELLS = {
    "rnn_tanh": (lambda: RNNCell(I, H), lambda: torch.nn.RNNCell(I, H)),
    "rnn_relu": (lambda: RNNCell(I, H, nonlinearity="relu"), lambda: torch.nn.RNNCell(I, H, nonlinearity="relu")),
    "lstm": (lambda: LSTMCell(I, H), lambda: torch.nn.LSTMCell(I, H)),
    "gru": (lambda: GRUCell(I, H), lambda: torch.nn.GRUCell(I, H)),
    "gru_no_bias": (lambda: GRUCell(I, H, bias=False), lambda: torch.nn.GRUCell(I, H, bias=False)),
}


@pytest.mark.parametrize("name", sorted(CELLS))
def test_cell_with_state(name, rng):
    cell, ref = twins(*CELLS[name])
    states = [rng.standard_normal((N, H)) for _ in range(2 if name == "lstm" else 1)]
    check_against_torch(cell, ref, rng.standard_normal((N, I)), states, rng)


@pytest.mark.parametrize("name", ["rnn_tanh", "lstm", "gru"])
def test_cell_without_state(name, rng):
    cell, ref = twins(*CELLS[name])
    check_against_torch(cell, ref, rng.standard_normal((N, I)), [], rng)


@pytest.mark.parametrize("name", ["rnn_relu", "lstm"])
def test_cell_unbatched(name, rng):
    cell, ref = twins(*CELLS[name])
    states = [rng.standard_normal(H) for _ in range(2 if name == "lstm" else 1)]
    check_against_torch(cell, ref, rng.standard_normal(I), states, rng)


def test_cell_steps_a_sequence_as_the_layer_does(rng):
    """A cell called once per step ends where the one-layer GRU with its weights ends."""
    cell, ref = twins(*CELLS["gru"])
    layer = GRU(I, H)
    layer.load_state_dict({k + "_l0": v for k, v in cell.state_dict().items()})
    x = jt.array(np.float32(rng.standard_normal((T, N, I))))
    h = None
    for t in range(T):
        h = cell(x[t], h)
    np.testing.assert_allclose(h.numpy(), layer(x)[1].numpy()[0], **TOL)


# --- parameters, init, state dicts, dropout ----------------------------------------------------
def test_parameters_have_pytorch_names_shapes_and_init():
    jt.seed(0)
    layer, ref = LSTM(3, 50, num_layers=2, bidirectional=True), torch.nn.LSTM(3, 50, num_layers=2, bidirectional=True)
    assert [(n, v.shape) for n, v in layer.named_parameters()] == \
        [(n, tuple(v.shape)) for n, v in ref.named_parameters()]
    values = np.concatenate([v.numpy().ravel() for v in layer.parameters()])
    bound = 1 / math.sqrt(50)
    assert values.dtype == np.float32 and np.abs(values).max() <= bound
    assert abs(values.mean()) < 0.01 and abs(values.std() - bound / math.sqrt(3)) < 0.01   # uniform
    for cell, ref_cell in [(GRUCell(3, 5), torch.nn.GRUCell(3, 5)), (LSTMCell(3, 5), torch.nn.LSTMCell(3, 5))]:
        assert [(n, v.shape) for n, v in cell.named_parameters()] == \
            [(n, tuple(v.shape)) for n, v in ref_cell.named_parameters()]


def test_rnn_base_takes_pytorch_and_jittor_modes(rng):
    layer, ref = twins(lambda: RNNBase("LSTM", I, H), lambda: torch.nn.LSTM(I, H))
    states = [rng.standard_normal((1, H)), rng.standard_normal((1, H))]
    check_against_torch(layer, ref, rng.standard_normal((T, I)), states, rng)
    assert RNNBase("RNN", I, H).mode == "RNN_TANH" and RNNBase("RNN_RELU", I, H).mode == "RNN_RELU"


def test_dropout_acts_between_layers_in_training_only(rng):
    layer, ref = twins(lambda: GRU(I, H, num_layers=2, dropout=0.5),
                       lambda: torch.nn.GRU(I, H, num_layers=2, dropout=0.5))
    x = np.float32(rng.standard_normal((T, N, I)))
    layer.eval()
    out, h_n = layer(jt.array(x))
    t_out, t_h = ref.eval()(torch.tensor(x, dtype=torch.float64))
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), **TOL)
    np.testing.assert_allclose(h_n.numpy(), t_h.detach().numpy(), **TOL)
    layer.train()
    jt.seed(0)
    train_out, train_h = layer(jt.array(x))
    np.testing.assert_array_equal(train_h.numpy()[0], h_n.numpy()[0])      # layer 0 sees no dropout
    assert not np.allclose(train_h.numpy()[1], h_n.numpy()[1])              # layer 1 reads dropped inputs
    assert not np.allclose(train_out.numpy(), out.numpy())


def test_dropout_with_one_layer_warns_as_pytorch_does():
    with pytest.warns(UserWarning, match="no effect with num_layers=1"):
        layer = LSTM(I, H, dropout=0.2)
    assert layer.dropout == 0.2


# --- errors ------------------------------------------------------------------------------------
def test_errors_name_the_problem():
    x = jt.zeros(T, N, I)
    cases = [
        (ValueError, "GRU: input must have shape (seq_len, batch, 4) or (seq_len, 4) unbatched (input_size=4), "
         "got (3, 2, 5)", lambda: GRU(I, H)(jt.zeros(T, N, 5))),
        (ValueError, "input must have shape (batch, seq_len, 4)", lambda: LSTM(I, H, batch_first=True)(jt.zeros(3))),
        (ValueError, "got (0, 2, 4)", lambda: RNN(I, H)(jt.zeros(0, N, I))),
        (ValueError, "GRU: h0 must have shape (4, 2, 4) (num_layers * num_directions, batch, hidden_size), "
         "got (2, 2, 4)", lambda: GRU(I, H, num_layers=2, bidirectional=True)(x, jt.zeros(2, N, H))),
        (ValueError, "RNN: h0 must have shape (1, 4) (num_layers * num_directions, hidden_size), got (1, 1, 4)",
         lambda: RNN(I, H)(jt.zeros(T, I), jt.zeros(1, 1, H))),
        (ValueError, "LSTM: c0 must have shape (1, 2, 4)",
         lambda: LSTM(I, H)(x, (jt.zeros(1, N, H), jt.zeros(1, N, 3)))),
        (TypeError, "LSTM: hx must be a tuple (h0, c0) of two Vars, got Var", lambda: LSTM(I, H)(x, jt.zeros(1, N, H))),
        (TypeError, "got tuple of length 1", lambda: LSTM(I, H)(x, (jt.zeros(1, N, H),))),
        (TypeError, "GRU: hx must be a Var (the initial hidden state), got a tuple",
         lambda: GRU(I, H)(x, (jt.zeros(1, N, H),))),
        (TypeError, "RNN: h0 must be float32 or float64, got int32",
         lambda: RNN(I, H)(x, jt.zeros(1, N, H, dtype="int32"))),
        (TypeError, "GRU: input must be a jtmini Var, got ndarray", lambda: GRU(I, H)(np.zeros((T, N, I)))),
        (TypeError, "LSTM: input must be float32 or float64, got int32",
         lambda: LSTM(I, H)(jt.zeros(T, N, I, dtype="int32"))),
        (ValueError, "GRUCell: input must have shape (batch, 4) or (4,) (input_size=4), got (2, 5)",
         lambda: GRUCell(I, H)(jt.zeros(N, 5))),
        (ValueError, "RNNCell: hx must have shape (2, 4) (batch, hidden_size), got (3, 4)",
         lambda: RNNCell(I, H)(jt.zeros(N, I), jt.zeros(3, H))),
        (ValueError, "LSTMCell: c must have shape (4,) (hidden_size), got (2, 4)",
         lambda: LSTMCell(I, H)(jt.zeros(I), (jt.zeros(H), jt.zeros(N, H)))),
        (TypeError, "LSTMCell: hx must be a tuple (h0, c0)",
         lambda: LSTMCell(I, H)(jt.zeros(N, I), jt.zeros(N, H))),
        (ValueError, "RNN: nonlinearity must be 'tanh' or 'relu', got 'sigmoid'",
         lambda: RNN(I, H, nonlinearity="sigmoid")),
        (ValueError, "RNNCell: nonlinearity must be 'tanh' or 'relu', got 'gelu'",
         lambda: RNNCell(I, H, nonlinearity="gelu")),
        (ValueError, f"LSTM: proj_size={H} must be smaller than hidden_size={H}",
         lambda: LSTM(I, H, proj_size=H)),
        (ValueError, "LSTM: proj_size must be an int >= 0 (0: no projection), got -1",
         lambda: LSTM(I, H, proj_size=-1)),
        (ValueError, "RNNBase: proj_size=2 is only supported by LSTM, not GRU",
         lambda: RNNBase("GRU", I, H, proj_size=2)),
        (ValueError, "GRU: dropout must be a number in [0, 1), got 1.5", lambda: GRU(I, H, num_layers=2, dropout=1.5)),
        (ValueError, "dropout must be a number in [0, 1), got 'a'", lambda: GRU(I, H, dropout="a")),
        (ValueError, "LSTM: hidden_size must be an int >= 1, got 0", lambda: LSTM(I, 0)),
        (ValueError, "GRU: num_layers must be an int >= 1, got 1.5", lambda: GRU(I, H, num_layers=1.5)),
        (ValueError, "GRUCell: input_size must be an int >= 1, got None", lambda: GRUCell(None, H)),
        (TypeError, "RNN: bidirectional must be a bool, got 'yes'", lambda: RNN(I, H, bidirectional="yes")),
        (TypeError, "LSTMCell: bias must be a bool, got 2", lambda: LSTMCell(I, H, bias=2)),
        (ValueError, "RNNBase: mode must be 'RNN_TANH', 'RNN_RELU', 'LSTM' or 'GRU' (or Jittor's 'RNN'), got 'lstm'",
         lambda: RNNBase("lstm", I, H)),
    ]
    for error, words, call in cases:
        with pytest.raises(error) as info:
            call()
        assert words in str(info.value), (words, str(info.value))
