"""schedule._merge_maps: a map kernel that reads, at its own index, a buffer another map kernel
computes takes that kernel in and stores both results, unless a step in between reads one of them.
Checked on the plans themselves and on the values they compute, against numpy."""
import numpy as np

import jtmini as jt
from jtmini import schedule


def kernels(targets):
    return [s for s in schedule.plan(targets) if isinstance(s, schedule.Kernel)]


def leaves(rng, *shapes):
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


def test_an_sgd_update_is_one_kernel_storing_momentum_and_parameter(rng):
    p, g, v = leaves(rng, (6, 5), (6, 5), (6, 5))
    param = jt.array(p)
    v_new = jt.array(v) * 0.9 + jt.array(g) + param * 1e-4
    p_new = param - v_new * 0.1
    (kernel,) = kernels([v_new, p_new])
    assert kernel.root is p_new and kernel.outputs == [v_new]
    assert len(kernel.inputs) == 3                      # p is read once, v_new not at all
    jt.reset_stats()
    jt.sync([v_new, p_new])
    assert jt.stats()["kernels_run"] == 1
    want_v = v * 0.9 + g + p * np.float32(1e-4)
    np.testing.assert_allclose(v_new.numpy(), want_v, rtol=1e-6)
    np.testing.assert_allclose(p_new.numpy(), p - want_v * np.float32(0.1), rtol=1e-6)


def test_a_chain_merges_whole_and_shared_inputs_are_read_once(rng):
    (x,) = leaves(rng, (4, 7))
    a = jt.array(x) * 2
    b = a + 1
    c = b * a                     # reads a and b, both at its own index
    (kernel,) = kernels([a, b, c])
    assert kernel.root is c and [v is w for v, w in zip(kernel.outputs, (a, b))] == [True, True]
    jt.sync([a, b, c])
    np.testing.assert_allclose(c.numpy(), (x * 2 + 1) * (x * 2), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), x * 2 + 1, rtol=1e-6)


def test_no_merge_past_a_step_that_reads_a_moved_output(rng):
    # u's kernel merges into w's; w's must then not merge into y's, because the reduce that runs
    # between them reads u, which would not exist yet
    (x,) = leaves(rng, (5, 6))
    u = jt.array(x) * 2
    w = u + 1
    r = u.sum()
    y = w * 3
    plan = schedule.plan([w, r, y])
    assert [type(s).__name__ for s in plan] == ["Kernel"] * 3
    assert plan[0].root is w and plan[0].outputs == [u] and plan[2].outputs == []
    jt.sync([w, r, y])
    np.testing.assert_allclose(r.numpy(), (x * 2).sum(), rtol=1e-5)
    np.testing.assert_allclose(y.numpy(), (x * 2 + 1) * 3, rtol=1e-6)


def test_a_buffer_read_at_another_index_is_not_merged(rng):
    (x,) = leaves(rng, (5, 5))
    t = jt.array(x) + 1
    y = t.transpose() * 2          # reads t transposed: t must be stored whole first
    ks = kernels([t, y])
    assert len(ks) == 2 and not any(k.outputs for k in ks)
    np.testing.assert_allclose(y.numpy(), (x + 1).T * 2, rtol=1e-6)


def test_merged_kernels_replay_with_new_values(rng):
    def update(p, g):
        param = jt.array(p)
        v = jt.array(g) * 0.5 + param
        return v, param - v
    for _ in range(3):             # same graph each time: the stored plan is reused
        p, g = leaves(rng, (3, 8), (3, 8))
        v, p_new = update(p, g)
        jt.sync([v, p_new])
        np.testing.assert_allclose(v.numpy(), g * 0.5 + p, rtol=1e-6)
        np.testing.assert_allclose(p_new.numpy(), p - (g * 0.5 + p), rtol=1e-6, atol=1e-7)


def test_a_value_only_the_merged_kernels_shared_is_not_stored(rng):
    # d is shared by two kernels, so it gets a buffer; once all three merge, nothing reads it
    p, g, v = leaves(rng, (4, 6), (4, 6), (4, 6))
    param = jt.array(p)
    d = jt.array(g) + param * 0.01
    v_new = jt.array(v) * 0.9 + d
    p_new = param - (d + v_new * 0.9) * 0.1            # Nesterov reads d twice
    (kernel,) = kernels([v_new, p_new])
    assert kernel.outputs == [v_new]
    jt.sync([v_new, p_new])
    want_d = g + p * np.float32(0.01)
    want_v = v * np.float32(0.9) + want_d
    np.testing.assert_allclose(p_new.numpy(), p - (want_d + want_v * np.float32(0.9)) * np.float32(0.1), rtol=1e-5)


def test_a_long_chain_of_values_read_twice_stays_linear_in_source(rng):
    # each w is read by two nodes of the next step; merged into one kernel, a node evaluated per
    # read would double the source per step (2**12 terms here)
    from jtmini import codegen
    (x,) = leaves(rng, (3, 4))
    w, want = jt.array(x), x.astype(np.float64)
    for _ in range(12):
        w = w * 0.5 + w * w * 0.25
        want = want * 0.5 + want * want * 0.25
    (kernel,) = kernels([w])
    assert len(codegen.generate(kernel).source) < 20_000
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-5)


def test_a_long_chain_is_cut_into_kernels_of_bounded_size():
    """Summing 3000 one-element slices in a Python loop (Jittor's test_split_grad does 30,000):
    one kernel would nest 6000 nodes deep, past Python's recursion limit and far too long to
    compile; kernels stop at schedule.MAX_FUSED nodes, before and after maps merge."""
    x_np = np.arange(3000, dtype=np.float32) / 7
    x = jt.array(x_np)
    total = x[0:1]
    for k in range(1, 3000):
        total = total + x[k:k + 1]
    kernels = [s for s in schedule.plan([total]) if isinstance(s, schedule.Kernel)]
    assert max(len(k.nodes) for k in kernels) <= schedule.MAX_FUSED
    expected = np.float32(0)
    for value in x_np:                     # the loop's own order of float32 additions
        expected = np.float32(expected + value)
    assert total.numpy()[0] == expected
    np.testing.assert_array_equal(jt.grad(total.sum(), x).numpy(), np.ones(3000, np.float32))


def test_an_adam_update_merges_through_a_kernel_that_took_another_in(rng):
    """The clipped gradient gc is read by m' and v' (two kernels); m' takes gc's kernel in, then
    v' takes that merged kernel in (gc is stored there now), then p' takes all: one kernel, and
    gc, read by nothing else, is not stored."""
    p, g, m, v = leaves(rng, (6, 5), (6, 5), (6, 5), (6, 5))
    v = np.abs(v)
    gc = jt.array(g) * 0.5
    m_new = jt.array(m) * 0.9 + gc * 0.1
    v_new = jt.array(v) * 0.99 + gc * gc * 0.01
    p_new = jt.array(p) - m_new / (v_new.sqrt() + 1e-8) * 0.1
    (kernel,) = kernels([m_new, v_new, p_new])
    assert kernel.root is p_new and {id(o) for o in kernel.outputs} == {id(m_new), id(v_new)}
    jt.reset_stats()
    jt.sync([m_new, v_new, p_new])
    assert jt.stats()["kernels_run"] == 1
    want_m, want_v = m * 0.9 + g * 0.5 * 0.1, v * 0.99 + (g * 0.5) ** 2 * 0.01
    np.testing.assert_allclose(m_new.numpy(), want_m, rtol=1e-6)
    np.testing.assert_allclose(v_new.numpy(), want_v, rtol=1e-6)
    np.testing.assert_allclose(p_new.numpy(), p - want_m / (np.sqrt(want_v) + 1e-8) * 0.1, rtol=1e-5)


class _ComposedAdamW(jt.nn.AdamW):
    """AdamW through its per-parameter ``updates`` (a subclass's own: no packed update)."""

    def updates(self, group, grads):
        return super().updates(group, grads)


def _clipped_step_plan(optimizer_class, rng):
    """(step, its root's op as planned) of one clipped AdamW step, planned anew: a computed
    packed update forgets its op, so the op is read when the step is planned."""
    model = jt.nn.Linear(5, 3)
    opt = optimizer_class(model.parameters(), lr=1e-2, weight_decay=0.1)
    x = jt.array(rng.standard_normal((4, 5)).astype(np.float32))
    opt.backward((model(x) ** 2).sum())
    opt.clip_grad_norm(0.5)
    plan, original = [], schedule.plan

    def planned(targets):
        steps = original(targets)
        plan.extend((s, s.root.op) for s in steps)
        return steps
    schedule.plan = planned
    try:
        jt.clear_caches()                    # planned here, not replayed
        opt.step()
    finally:
        schedule.plan = original
    return plan


def test_adamw_with_clipping_is_one_library_call(rng):
    ops = [(type(s).__name__, op) for s, op in _clipped_step_plan(jt.nn.AdamW, rng)]
    assert ops.count(("LibraryCall", "adam_many")) == 1, ops
    assert ("Kernel", "adam_update") not in ops


def test_adamw_with_clipping_runs_one_kernel_per_parameter(rng):
    steps = [s for s, _ in _clipped_step_plan(_ComposedAdamW, rng)]
    updates = [s for s in steps if isinstance(s, schedule.Kernel) and s.root.op == "adam_update"]
    assert len(updates) == 2, updates
    # m' and v' stored beside p' (and the clipped gradient where something still holds it)
    assert all([o.op for o in s.outputs][-2:] == ["axpby", "axpby_square"] for s in updates), \
        [[o.op for o in s.outputs] for s in updates]


def test_a_large_pad_on_short_inner_dims_gets_its_own_kernel(rng):
    # a conv's live-tap weight gradient, (O, C) padded to (O, C, 3, 3), feeding a momentum
    # update: inlined, its bounds checks would leave the update's 3-trip inner loop scalar
    o, c = 128, 1024
    g, p, v = leaves(rng, (o, c), (o, c, 3, 3), (o, c, 3, 3))
    padded = jt.nn.pad(jt.array(g).reshape(o, c, 1, 1), (1, 1, 1, 1))
    param = jt.array(p)
    v_new = jt.array(v) * 0.9 + padded + param * 1e-4
    p_new = param - v_new * 0.1
    plan = kernels([v_new, p_new])
    assert [k.root.op for k in plan] == ["pad", plan[1].root.op] and plan[1].root is p_new
    assert plan[1].outputs == [v_new]
    want_g = np.zeros((o, c, 3, 3), np.float32)
    want_g[:, :, 1, 1] = g
    want_v = v * np.float32(0.9) + want_g + p * np.float32(1e-4)
    jt.sync([v_new, p_new])
    np.testing.assert_allclose(v_new.numpy(), want_v, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(p_new.numpy(), p - want_v * np.float32(0.1), rtol=1e-6, atol=1e-6)


def test_a_small_or_wide_pad_stays_inlined(rng):
    for shape, pads in (((16, 8, 1, 1), (1, 1, 1, 1)), ((1024, 600), (0, 0, 2, 2))):
        (x,) = leaves(rng, shape)
        padded = jt.nn.pad(jt.array(x), pads)
        out = padded * 2 + 1
        assert [k.root for k in kernels([out])] == [out]
