"""Shape and selection functions (jtmini/ops/shaping.py) against PyTorch CPU: values and gradients
on contiguous and non-contiguous inputs, the eager ones (nonzero, one-argument where), and the
error messages. Functions are read from the registry, so the test does not depend on the wiring
in jtmini/ops/__init__.py."""
import numpy as np
import pytest
import torch

import jtmini as jt

from conftest import assert_var, check_grad

F = vars(jt)        # the public functions, jt.<name>

IDX = np.array([2, 0, 2, 3])                 # repeated entries: their gradients must accumulate
GIDX = np.array([[1, 0, 1], [2, 2, 0]])      # gather index for a (3, 4) input along dim 0


def _cat(pieces):
    """The pieces joined, each weighted by its position, so a misplaced piece shows."""
    return jt.concat([p * (k + 1) for k, p in enumerate(pieces)], 1)


def _tcat(pieces):
    return torch.cat([p * (k + 1) for k, p in enumerate(pieces)], 1)


MASK = np.array([[True, False, False, True]])
# name: (jtmini fn, torch fn, input shapes)
GRAD_CASES = {
    "clone": (lambda x: x.clone(), lambda x: x.clone(), [(3, 4)]),
    "copy": (lambda x: F["copy"](x), lambda x: x.clone(), [(3, 4)]),
    "unsqueeze": (lambda x: x.unsqueeze(-2), lambda x: x.unsqueeze(-2), [(3, 4)]),
    "squeeze all": (lambda x: x.squeeze(), lambda x: x.squeeze(), [(3, 1, 4)]),
    "squeeze dims": (lambda x: F["squeeze"](x, (1, 2)), lambda x: x.squeeze((1, 2)), [(3, 1, 4)]),
    "flatten": (lambda x: x.flatten(), lambda x: x.flatten(), [(2, 3, 4)]),
    "flatten range": (lambda x: x.flatten(0, 1), lambda x: x.flatten(0, 1), [(2, 3, 4)]),
    "expand": (lambda x: x.expand(2, -1, 4), lambda x: x.expand(2, -1, 4), [(3, 1)]),
    "repeat": (lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3), [(3, 4)]),
    "chunk": (lambda x: _cat(x.chunk(3, dim=1)), lambda x: _tcat(x.chunk(3, dim=1)), [(3, 4)]),
    "split": (lambda x: _cat(x.split(3, 1)), lambda x: _tcat(x.split(3, 1)), [(3, 4)]),
    "split sections": (lambda x: _cat(F["split"](x, [1, 0, 3], dim=-1)),
                       lambda x: _tcat(torch.split(x, [1, 0, 3], dim=-1)), [(3, 4)]),
    "roll": (lambda x: x.roll((1, -5), (0, 1)), lambda x: x.roll((1, -5), (0, 1)), [(3, 4)]),
    "roll flat": (lambda x: x.roll(5), lambda x: x.roll(5), [(3, 4)]),
    "t": (lambda x: x.t(), lambda x: x.t(), [(3, 4)]),
    "masked_fill": (lambda x: x.masked_fill(jt.array(MASK), -2.0),
                    lambda x: x.masked_fill(torch.tensor(MASK), -2.0), [(3, 4)]),
    "masked_fill var": (lambda x, v: x.masked_fill(jt.array(MASK), v),
                        lambda x, v: x.masked_fill(torch.tensor(MASK), v), [(3, 4), ()]),
    "index_select": (lambda x: x.index_select(1, jt.array(IDX.astype(np.int32))),
                     lambda x: x.index_select(1, torch.tensor(IDX)), [(3, 4)]),
    "gather": (lambda x: x.gather(0, jt.array(GIDX)), lambda x: x.gather(0, torch.tensor(GIDX)), [(3, 4)]),
    "gather dim 1": (lambda x: F["gather"](x, -1, jt.array(IDX[None].repeat(3, 0))),
                     lambda x: x.gather(-1, torch.tensor(IDX[None].repeat(3, 0))), [(3, 4)]),
    "triu": (lambda x: x.triu(1), lambda x: x.triu(1), [(2, 3, 4)]),
    "tril": (lambda x: F["tril"](x, -1), lambda x: x.tril(-1), [(2, 3, 4)]),
    "ternary": (lambda x, y: F["ternary"](x > 0, x, y), lambda x, y: torch.where(x > 0, x, y), [(3, 4), (1, 4)]),
    "meshgrid": (lambda a, b: jt.stack(F["meshgrid"](a, b * 2)),
                 lambda a, b: torch.stack(torch.meshgrid(a, b * 2, indexing="ij")), [(3,), (4,)]),
    "diag of vector": (lambda x: F["diag"](x, 1), lambda x: torch.diag(x, 1), [(4,)]),
    "diag of matrix": (lambda x: x.diag(-1), lambda x: torch.diag(x, -1), [(3, 4)]),
    "bmm": (lambda a, b: F["bmm"](a, b), torch.bmm, [(2, 3, 4), (2, 4, 3)]),
}
EINSUM = {
    "bij,bjk->bik": [(2, 3, 4), (2, 4, 3)],
    "bhqd,bhkd->bhqk": [(2, 2, 3, 4), (2, 2, 4, 4)],
    "ij,j->i": [(3, 4), (4,)],
    "bi,bi->b": [(3, 4), (3, 4)],
    "i,j->ij": [(3,), (4,)],
    "ijk,jl->li": [(2, 3, 4), (3, 4)],         # k is summed before the product
    "ij,kj": [(3, 4), (2, 4)],                 # implicit output: 'ik'
    "ij->ji": [(3, 4)],
    "ijk->j": [(2, 3, 4)],
}
for _eq, _shapes in EINSUM.items():
    GRAD_CASES[f"einsum {_eq}"] = (lambda *xs, eq=_eq: F["einsum"](eq, *xs),
                                   lambda *xs, eq=_eq: torch.einsum(eq, *xs), _shapes)


@pytest.mark.parametrize("layout", ["contig", "strided"])
@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_values_and_gradients_match_torch(name, layout, rng):
    jt_fn, torch_fn, shapes = GRAD_CASES[name]
    values = [rng.standard_normal(s) for s in shapes]
    # strided: the first input is read through a transpose or a strided window, by turns
    other = "transposed" if len(name) % 2 else "sliced"
    layouts = [other if layout == "strided" and k == 0 else "contig" for k in range(len(values))]
    check_grad(jt_fn, torch_fn, values, layouts=layouts, rng=rng)


def test_int_values_match_numpy():
    ref = np.arange(12, dtype=np.int32).reshape(3, 4)
    x = jt.array(ref)
    assert_var(x.repeat(2, 1), np.tile(ref, (2, 1)))
    assert_var(x.roll(-1, 1), np.roll(ref, -1, 1))
    assert_var(x.index_select(0, [2, -1]), ref[[2, -1]])
    assert_var(x.masked_fill(jt.array(MASK), 2.7), np.where(MASK, 2, ref))     # cast to x's dtype
    assert_var(F["triu"](x), np.triu(ref))
    assert_var(x.t(), ref.T)
    assert_var(F["diag"](x), np.diag(ref))


def test_shapes_sizes_and_pieces():
    x = jt.zeros(2, 3, 4)
    assert x.size() == (2, 3, 4) and x.size(-1) == 4 and F["size"](x, 1) == 3
    assert x.unsqueeze(3).shape == (2, 3, 4, 1) and x.squeeze(0).shape == (2, 3, 4)
    assert F["flatten"](jt.array(2.0)).shape == (1,) and jt.zeros(2, 3, 1).t().shape == (2, 1, 3)
    assert [c.shape[0] for c in jt.zeros(6).chunk(4)] == [2, 2, 2]            # fewer pieces, as torch
    assert [c.shape[0] for c in jt.zeros(0).chunk(3)] == [0, 0, 0]
    assert isinstance(x.chunk(2), list) and isinstance(x.split(1), tuple)
    assert [p.shape[1] for p in x.split(2, dim=1)] == [2, 1]
    assert x.expand((2, 3, 4)).shape == (2, 3, 4) and jt.zeros(1).repeat(3, 2).shape == (3, 2)
    np.testing.assert_array_equal(jt.array([1, 2, 3]).t().numpy(), [1, 2, 3])


def test_clone_is_a_new_value():
    x = jt.array(np.arange(4.0))
    y = x.clone()
    y[0] = 9.0
    y += 1
    np.testing.assert_array_equal(x.numpy(), np.arange(4.0))
    np.testing.assert_array_equal(y.numpy(), [10, 2, 3, 4])


def test_index_meshgrid_eye_linspace():
    rows, cols = F["index"]((2, 3))
    assert rows.dtype == "int32" and cols.shape == (2, 3)
    np.testing.assert_array_equal(rows.numpy(), np.indices((2, 3))[0])
    np.testing.assert_array_equal(jt.zeros(2, 3).index(-1).numpy(), np.indices((2, 3))[1])
    grids = F["meshgrid"]([jt.array([1, 2]), jt.array([3, 4, 5])])
    for got, want in zip(grids, np.meshgrid([1, 2], [3, 4, 5], indexing="ij")):
        np.testing.assert_array_equal(got.numpy(), want)
    assert_var(F["eye"](3), np.eye(3, dtype=np.float32))
    assert_var(F["eye"](2, 4, dtype="int32"), np.eye(2, 4, dtype=np.int32))
    assert_var(F["eye"]((3, 2)), np.eye(3, 2, dtype=np.float32))
    for start, end, steps in [(0, 1, 5), (-2.5, 7, 11), (3, 3, 1), (0, 1, 0)]:
        assert_var(F["linspace"](start, end, steps), torch.linspace(start, end, steps).numpy())


def test_nonzero_and_one_argument_where_are_eager_int32_as_jittor(rng):
    ref = (rng.standard_normal((3, 4)) > 0.3) * rng.standard_normal((3, 4))
    x = jt.array(ref.astype(np.float32)) * 1                      # lazy: computed by the call
    assert_var(F["nonzero"](x), torch.nonzero(torch.tensor(ref)).numpy().astype(np.int32))
    assert_var(x.nonzero(), np.argwhere(ref).astype(np.int32))
    got = F["where"](x != 0)
    assert isinstance(got, tuple) and len(got) == 2
    for g, want in zip(got, torch.where(torch.tensor(ref != 0))):
        assert_var(g, want.numpy().astype(np.int32))
    assert [v.numpy().tolist() for v in F["where"](jt.array(True))] == [[0]]
    assert F["nonzero"](jt.zeros(2, 3)).shape == (0, 2)
    assert_var(F["where"](jt.array([True, False]), 1.0, jt.array([5.0, 6.0])), np.float32([1, 6]))


def test_gather_and_index_select_lazy_int_index():
    x = jt.array(np.arange(12.0).reshape(3, 4))
    idx = jt.array(np.array([[3, 0], [1, 1], [0, 2]], np.int32)) - 1        # checked once computed
    np.testing.assert_array_equal(x.gather(1, idx).numpy(), [[2, 3], [4, 4], [11, 9]])
    np.testing.assert_array_equal(x.index_select(0, jt.array(1)).numpy(), [[4, 5, 6, 7]])
    np.testing.assert_array_equal(F["gather"](jt.array(5.0), 0, jt.array(0)).numpy(), 5.0)


def _raises(kind, words, fn, *args, **kwargs):
    with pytest.raises(kind) as err:
        fn(*args, **kwargs)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


X34 = np.zeros((3, 4), np.float32)
ERRORS = [
    (IndexError, ["index 4", "dim 1", "size 4"], lambda x: x.index_select(1, jt.array([0, 4]))),
    (IndexError, ["index -4", "dim 0", "size 3"], lambda x: x.index_select(0, [-4])),
    (TypeError, ["an integer Var", "float32"], lambda x: x.index_select(0, jt.array([0.0]))),
    (ValueError, ["1-D", "(1, 2)"], lambda x: x.index_select(0, [[0, 1]])),
    (IndexError, ["index 3", "dim 0", "size 3"], lambda x: x.gather(0, jt.array([[3, 0]]))),
    (ValueError, ["(2, 5)", "(3, 4)", "dim 0"], lambda x: x.gather(0, jt.zeros(2, 5, dtype="int32"))),
    (ValueError, ["(4,)", "(3, 4)"], lambda x: x.gather(1, jt.zeros(4, dtype="int32"))),
    (IndexError, ["dim 3"], lambda x: x.unsqueeze(3)),
    (IndexError, ["dim -3"], lambda x: x.squeeze(-3)),
    (IndexError, ["dim 2"], lambda x: x.size(2)),
    (ValueError, ["start_dim 1", "end_dim 0"], lambda x: x.flatten(1, 0)),
    (ValueError, ["-1", "(-1, 3, 4)"], lambda x: x.expand(-1, 3, 4)),
    (ValueError, ["not compatible", "(3, 5)"], lambda x: x.expand(3, 5)),
    (TypeError, ["2.0"], lambda x: x.repeat(2.0, 1)),
    (ValueError, ["negative", "(-1, 1)"], lambda x: x.repeat(-1, 1)),
    (ValueError, ["chunks", "0"], lambda x: x.chunk(0)),
    (ValueError, ["(1, 2)", "dim 1", "size 4"], lambda x: x.split([1, 2], 1)),
    (ValueError, ["split_size", "0"], lambda x: x.split(0)),
    (ValueError, ["2 shifts", "1 dims"], lambda x: x.roll((1, 2), 0)),
    (ValueError, ["without dims"], lambda x: x.roll((1, 2))),
    (TypeError, ["bool", "float32"], lambda x: x.masked_fill(jt.zeros(3, 4), 1.0)),
    (ValueError, ["(2, 4)", "(3, 4)"], lambda x: x.masked_fill(jt.zeros(2, 4, dtype="bool"), 1.0)),
    (ValueError, ["0-d", "(2,)"], lambda x: x.masked_fill(jt.zeros(3, 4, dtype="bool"), jt.zeros(2))),
    (ValueError, ["triu", "(4,)"], lambda x: x[0].triu()),
    (ValueError, ["1-D or 2-D", "(1, 3, 4)"], lambda x: F["diag"](x[None])),
    (TypeError, ["diagonal", "0.5"], lambda x: x.diag(0.5)),
    (ValueError, ["3 or more dims", "(3, 4)"], lambda x: F["bmm"](x, x)),
    (ValueError, ["(1, 3, 4) and (2, 3, 4)", "inner 4 vs 3"], lambda x: F["bmm"](x[None], jt.zeros(2, 3, 4))),
    (ValueError, ["input 1", "(2, 2)"], lambda x: F["meshgrid"](jt.zeros(2), jt.zeros(2, 2))),
    (TypeError, ["eye", "2.5"], lambda x: F["eye"](2.5)),
    (ValueError, ["eye", "-1"], lambda x: F["eye"](2, -1)),
    (ValueError, ["linspace", "steps", "-1"], lambda x: F["linspace"](0, 1, -1)),
    (TypeError, ["where", "only one of x and y"], lambda x: F["where"](x > 0, x)),
]
EINSUM_ERRORS = [
    ("i.j->ij", [(3, 4)], "'.' only as part of it"),
    ("ii->i", [(3, 4)], "needs equal dims"),
    ("ij,jk,kl->il", [(3, 4), (4, 3)], "3 terms for 2 operands"),
    ("ij,jk->iz", [(3, 4), (4, 3)], "'iz'"),
    ("ij,jk->ik", [(3, 4), (5, 3)], "sizes 4 and 5"),
    ("ijk,jk->i", [(3, 4), (4, 3)], "(3, 4)"),
    ("ij,jk->ii", [(3, 4), (4, 3)], "'ii'"),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_errors_name_the_offender(case):
    kind, words, action = ERRORS[case]
    _raises(kind, words, action, jt.array(X34))


@pytest.mark.parametrize("equation, shapes, words", EINSUM_ERRORS)
def test_einsum_refuses_with_the_equation(equation, shapes, words):
    _raises(ValueError, [repr(equation), words], F["einsum"], equation, *[jt.zeros(*s) for s in shapes])
