"""jt.code: Jittor's code op (a kernel body written in C++), values and gradients against numpy,
Jittor's own examples, and the errors of a body that cannot work."""
import gc
import weakref

import numpy as np
import pytest
import jtmini as jt
from jtmini.compiler import CompileError

FLIP = """for (int i = 0; i < in0_shape0; i++)
    for (int j = 0; j < in0_shape1; j++)
        @out(i, j) = @in0(i, in0_shape1 - 1 - j);"""
FLIP_GRAD = """for (int i = 0; i < in0_shape0; i++)
    for (int j = 0; j < in0_shape1; j++)
        @out(i, j) = @dout(i, in0_shape1 - 1 - j);"""


def test_sort_with_aliases_and_a_header():
    """Jittor's Example-2: @alias, a header with an #include, std::sort on the output."""
    a = jt.array([3, 2, 1, 7, -4])
    b = jt.code(a.shape, a.dtype, [a],
                cpu_header="#include <algorithm>\n@alias(a, in0)\n@alias(b, out)",
                cpu_src="for (int i=0; i<a_shape0; i++) @b(i) = @a(i);\nstd::sort(&@b(0), &@b(in0_shape0));")
    np.testing.assert_array_equal(b.numpy(), [-4, 1, 2, 3, 7])


def test_two_outputs_of_one_body():
    """Jittor's Example-3: a list of shapes and dtypes gives a list of Vars."""
    a = jt.array(np.array([5.0, -2.0, 9.0, 0.5]))
    lo, hi = jt.code([(1,), (1,)], [a.dtype, a.dtype], [a], cpu_src="""
        @alias(a, in0)
        @out0(0) = @out1(0) = @a(0);
        for (int i = 0; i < a_shape0; i++) { @out0(0) = std::min(@out0(0), @a(i)); @out1(0) = std::max(@out1(0), @a(i)); }""")
    jt.sync([lo, hi])
    assert lo.dtype == hi.dtype == a.dtype and lo.numpy()[0] == -2.0 and hi.numpy()[0] == 9.0


def test_outputs_of_several_dtypes_and_ranks(rng):
    x = rng.standard_normal((4, 5))
    total, idx, dbl = jt.code([(), (4,), (4, 5)], ["float64", "int32", "float32"], [jt.array(x)], cpu_src="""
        @out0() = 0;
        for (int i = 0; i < in0_shape0; i++) {
            int best = 0;
            for (int j = 0; j < in0_shape1; j++) {
                @out0() += @in0(i, j);
                @out2(i, j) = 2 * @in0(i, j);
                if (@in0(i, j) > @in0(i, best)) best = j;
            }
            @out1(i) = best;
        }""")
    np.testing.assert_allclose(total.numpy(), x.sum(), rtol=1e-12)
    np.testing.assert_array_equal(idx.numpy(), x.argmax(1))
    np.testing.assert_allclose(dbl.numpy(), (2 * x).astype(np.float32), rtol=1e-6)


def test_data_values_are_arguments():
    """Jittor's Example-6: data["x"] is read at run time; a new value compiles nothing."""
    first = jt.code([1], "float32", [], data={"x": 123}, cpu_src='@out0(0) = data["x"];')
    assert first.item() == 123
    before = jt.stats()["kernels_compiled"]
    second = jt.code([1], "float32", [], data={"x": -4.5}, cpu_src='@out0(0) = data["x"];')
    assert second.item() == -4.5 and jt.stats()["kernels_compiled"] == before


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_value_and_gradient_against_numpy(rng, layout):
    base = rng.standard_normal((5, 3)).astype(np.float32)
    x = jt.array(base)
    if layout == "transposed":        # a view: the op reads it C-contiguous, gathered first
        x, base = jt.array(base.T.copy()).transpose(), base
    y = jt.code(x.shape, x.dtype, [x], cpu_src=FLIP, cpu_grad_src=[FLIP_GRAD])
    np.testing.assert_array_equal(y.numpy(), base[:, ::-1])
    w = rng.standard_normal(base.shape).astype(np.float32)
    g = jt.grad((y * jt.array(w)).sum(), x)
    np.testing.assert_allclose(g.numpy(), w[:, ::-1], rtol=1e-6)


def test_gradient_through_a_function_as_jittor_documents():
    """Jittor's Example-1: jt.Function whose execute and grad are both code ops."""
    class Func(jt.Function):
        def execute(self, x):
            self.save_vars = x
            return jt.code(x.shape, x.dtype, [x], cpu_src="for (int i=0; i<in0_shape0; i++) @out(i) = @in0(i)*@in0(i)*2;")

        def grad(self, grad_x):
            x = self.save_vars
            return jt.code(x.shape, x.dtype, [x, grad_x], cpu_src="for (int i=0; i<in0_shape0; i++) @out(i) = @in1(i)*@in0(i)*4;")
    a = jt.random([10])
    b = Func()(a)
    np.testing.assert_allclose(b.numpy(), 2 * a.numpy() ** 2, rtol=1e-6)
    np.testing.assert_allclose(jt.grad(b, a).numpy(), 4 * a.numpy(), rtol=1e-6)


def test_gradient_of_two_outputs_reads_pout_and_dout(rng):
    """Each output's gradient runs the input's grad body with that output as pout: y0 = y1 = x^2,
    so d(sum(w0 y0 + w1 y1))/dx = 2 x (w0 + w1), the body reading pout as x^2."""
    xv = rng.uniform(0.5, 2.0, 6)
    w0, w1 = rng.standard_normal(6), rng.standard_normal(6)
    x = jt.array(xv)
    y0, y1 = jt.code([(6,), (6,)], ["float64", "float64"], [x],
                     cpu_src="for (int i=0; i<6; i++) @out0(i) = @out1(i) = @in0(i) * @in0(i);",
                     cpu_grad_src=["for (int i=0; i<in0_shape0; i++) @out(i) = @dout(i) * 2 * std::sqrt(@pout(i));"])
    g = jt.grad((y0 * jt.array(w0) + y1 * jt.array(w1)).sum(), x)
    np.testing.assert_allclose(g.numpy(), 2 * xv * (w0 + w1), rtol=1e-12)


def test_no_grad_body_means_no_gradient():
    x = jt.array([1.0, 2.0])
    y = jt.code(x.shape, x.dtype, [x], cpu_src="for (int i=0; i<2; i++) @out(i) = @in0(i);")
    assert np.all(jt.grad((y * 3).sum() + x.sum(), x).numpy() == 1.0)


def test_numpy_inputs_and_a_threaded_body():
    x = np.arange(1000, dtype=np.float32)
    y = jt.code(x.shape, "float32", [x], cpu_src="""
        #pragma omp parallel for
        for (int i = 0; i < in0_shape0; i++) @out(i) = @in0(i) + 1;""")
    np.testing.assert_array_equal(y.numpy(), x + 1)


@pytest.mark.parametrize("src, words", [
    ("@out(0, 1) = 1;", ["@out0(...) takes 1 indices", "got 2"]),
    ("@foo(0) = 1;", ["unknown macro @foo", "in0, out0"]),
    ('@out(0) = data["y"];', ["data['y'] is not in data", "['x']"]),
    ("@out = 1;", ["@out needs its indices"]),
    ("@out(0 = 1;", ["unbalanced parenthesis"]),
])
def test_bad_bodies_are_named(src, words):
    with pytest.raises(ValueError) as e:
        jt.code([3], "float32", [jt.ones(3)], cpu_src=src, data={"x": 1})
    for w in words:
        assert w in str(e.value)


def test_bad_calls_are_named():
    with pytest.raises(ValueError, match="negative dim"):
        jt.code([-5], "float32", [jt.ones(3)], cpu_src="@out(0) = 1;")
    with pytest.raises(ValueError, match="jtmini runs no cuda_src"):
        jt.code([3], "float32", [jt.ones(3)], cuda_src="kernel<<<1, 1>>>();")
    with pytest.raises(ValueError, match="2 output shapes but 1 dtypes"):
        jt.code([(1,), (2,)], ["float32"], [jt.ones(3)], cpu_src="@out0(0) = 1;")
    with pytest.raises(TypeError, match=r"inputs\[1\] must be a Var"):
        jt.code([3], "float32", [jt.ones(3), [1, 2]], cpu_src="@out(0) = 1;")
    with pytest.raises(ValueError, match="@alias\\(b, in4\\) names no buffer"):
        jt.code([3], "float32", [jt.ones(3)], cpu_src="@alias(b, in4)\n@b(0) = 1;")


def test_a_body_that_does_not_compile_says_so_with_the_compiler_message():
    with pytest.raises(CompileError, match="undefined_name") as info:
        jt.code([3], "float32", [jt.ones(3)], cpu_src="@out(0) = undefined_name;").numpy()
    del info            # the traceback holds the Var: let it go, so later tests' steps do not meet it
    gc.collect()


def test_a_failed_build_does_not_keep_the_graph_alive():
    """Raising a stored compile error again must not pin the frames (and Vars) of each caller."""
    def fetch_and_fail():
        y = jt.code([3], "float32", [jt.ones(3)], cpu_src="@out(0) = also_undefined;")
        with pytest.raises(CompileError):
            y.numpy()
        return weakref.ref(y)
    refs = [fetch_and_fail() for _ in range(2)]
    gc.collect()
    assert all(r() is None for r in refs)


def test_outputs_written_in_place_from_their_values():
    """Jittor's jt.code(inputs, outputs): the body adds into the outputs' current values."""
    a, b, c = jt.array([3, 2, 1]), jt.array([1, 2]), jt.array([3, 4, 5, 6])
    old_b = b * 1                        # built before: still sees b's old value
    got = jt.code([a], [b, c], cpu_src="""
        @alias(a, in0)
        @alias(b, out0)
        @alias(c, out1)
        for (int i=0; i<a_shape0; i++) {
            if (i<b_shape0) @b(i) += @a(i);
            if (i<c_shape0) @c(i) += @a(i);
        }""")
    assert got[0] is b and got[1] is c and b.shape == (2,) and c.shape == (4,)
    np.testing.assert_array_equal(b.numpy(), [4, 4])
    np.testing.assert_array_equal(c.numpy(), [6, 6, 6, 6])
    np.testing.assert_array_equal(old_b.numpy(), [1, 2])


def test_indented_includes_and_comments_in_the_header():
    """Jittor's test_comment / test_multi_output2: a header as an indented Python string."""
    a = jt.array([3, 2, 1])
    b = jt.code(a.shape, a.dtype, [a], cpu_header="""
            #include <algorithm>
            #include <iostream>
            // a comment
            /* and a
            */
            using namespace std;""", cpu_src="""
                /* multi
                line */
                @alias(a, in0)
                for (int i=0; i<a_shape0; i++) @out(i) = @a(i);   // copy
                std::sort(&@out(0), &@out(a_shape0));""")
    np.testing.assert_array_equal(b.numpy(), [1, 2, 3])


# --- jt.numpy_code ---------------------------------------------------------------------------
def _add_sub(np, data):
    a, b = data["inputs"]
    c, d = data["outputs"]
    np.add(a, b, out=c)
    np.subtract(a, b, out=d)


def _pass_dout(np, data):
    np.copyto(data["outputs"][0], data["dout"])


def _signed_dout(np, data):
    """d(a - b)/db = -1: the sign depends on which output's gradient this is."""
    if data["out_index"] == 0:
        np.copyto(data["outputs"][0], data["dout"])
    else:
        np.negative(data["dout"], data["outputs"][0])


def test_numpy_code_two_outputs_and_their_gradients(rng):
    """Jittor's test_multi_input: c = a + b, d = a - b with one backward function per input."""
    av, bv = rng.standard_normal((5, 1)).astype(np.float32), rng.standard_normal((5, 1)).astype(np.float32)
    a, b = jt.array(av), jt.array(bv)
    c, d = jt.numpy_code([a.shape, a.shape], [a.dtype, a.dtype], [a, b], _add_sub, [_pass_dout, _signed_dout])
    np.testing.assert_array_equal(c.numpy(), av + bv)
    np.testing.assert_array_equal(d.numpy(), av - bv)
    w = rng.standard_normal((5, 1)).astype(np.float32)
    ga, gb = jt.grad((c * 2 + d * jt.array(w)).sum(), [a, b])
    np.testing.assert_allclose(ga.numpy(), 2 + w, rtol=1e-6)
    np.testing.assert_allclose(gb.numpy(), 2 - w, rtol=1e-6)


def test_numpy_code_in_a_repeated_training_step(rng):
    """A step whose graph repeats (replayed programs) calls the function every step, on new values."""
    w = jt.array(rng.standard_normal(4).astype(np.float32))
    calls = []

    def cube(np, data):
        calls.append(1)
        np.power(data["inputs"][0], 3, out=data["outputs"][0])

    def cube_grad(np, data):
        x = data["inputs"][0]
        np.multiply(data["dout"], 3 * x * x, out=data["outputs"][0])
    opt = jt.optim.SGD([w], lr=0.01)
    for step in range(4):
        before = w.numpy()
        loss = jt.numpy_code(w.shape, w.dtype, [w], cube, [cube_grad]).sum()
        opt.step(loss)
        np.testing.assert_allclose(w.numpy(), before - 0.01 * 3 * before ** 2, rtol=1e-5)
    assert len(calls) == 4


def test_numpy_code_inputs_are_read_only_and_bad_calls_are_named():
    def writes_input(np, data):
        data["inputs"][0][0] = 5
    x = jt.array([1.0, 2.0])
    with pytest.raises(ValueError, match="read-only"):
        jt.numpy_code(x.shape, x.dtype, [x], writes_input).numpy()
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])
    with pytest.raises(TypeError, match="forward must be a function"):
        jt.numpy_code(x.shape, x.dtype, [x], "np.add")
    with pytest.raises(TypeError, match=r"backward\[1\] must be a function or None"):
        jt.numpy_code(x.shape, x.dtype, [x], _pass_dout, [None, 3])


def test_a_kept_var_that_fails_does_not_break_later_optimizer_steps():
    """A notebook's failed expression stays referenced; the optimizer computes every pending Var
    with its step, so it must not fail every later step: it warns once and leaves that Var out."""
    w = jt.array([1.0, 2.0])
    opt = jt.optim.SGD([w], lr=0.5)
    broken = jt.code([1], "float32", [w], cpu_src="@out(0) = not_declared;")
    with pytest.warns(RuntimeWarning, match="left out of later steps.*not_declared"):
        opt.step((w * w).sum())
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])
    opt.step((w * w + w).sum())                 # no warning, no error: the Var is no longer pending
    np.testing.assert_allclose(w.numpy(), [-0.5, -0.5])
    with pytest.raises(CompileError, match="not_declared"):
        broken.numpy()
    with pytest.raises(CompileError, match="not_declared"):      # the step's own loss failing still raises
        opt.step(jt.code([1], "float32", [w], cpu_src="@out(0) = not_declared;").sum() + w.sum())
