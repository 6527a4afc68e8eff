"""``jt.nms`` (Jittor's non-maximum suppression) and ``jt.candidate`` (its greedy filter with a
fail condition) against plain greedy loops over the kept rows; ``jt.knn`` against numpy."""
import numpy as np
import pytest

import jtmini as jt


def _greedy(dets, thresh):
    kept = []
    for i in sorted(range(len(dets)), key=lambda k: -dets[k][4]):
        x1, y1, x2, y2, _ = dets[i]
        clear = True
        for j in kept:
            a1, b1, a2, b2, _ = dets[j]
            w = max(0.0, min(x2, a2) - max(x1, a1) + 1)
            h = max(0.0, min(y2, b2) - max(y1, b1) + 1)
            inter = w * h
            union = (x2 - x1 + 1) * (y2 - y1 + 1) + (a2 - a1 + 1) * (b2 - b1 + 1) - inter
            clear = clear and not inter / union > thresh
        if clear:
            kept.append(i)
    return kept


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("thresh", [0.0, 0.3, 0.7])
def test_nms_matches_a_greedy_loop(seed, thresh):
    rng = np.random.default_rng(seed)
    n = 40
    corner = rng.uniform(0, 50, (n, 2))
    size = rng.uniform(1, 30, (n, 2))
    dets = np.concatenate([corner, corner + size, rng.uniform(0, 1, (n, 1))], axis=1).astype("float32")
    got = jt.nms(jt.array(dets), thresh)
    assert got.dtype == "int32"
    assert got.numpy().tolist() == _greedy(dets.astype(np.float64).tolist(), thresh)


def test_nms_edges():
    assert jt.nms(np.zeros((0, 5), "float32"), 0.5).shape == (0,)
    same = np.array([[0, 0, 4, 4, 0.5]] * 3, "float32")
    assert jt.nms(same, 0.99).numpy().tolist() == [0]          # equal scores: the first one
    with pytest.raises(ValueError, match=r"nms: dets must be \(N, 5\) rows .*got shape \(3, 4\)"):
        jt.nms(jt.zeros(3, 4), 0.5)


def test_knn_finds_the_nearest_known_points(rng=np.random.default_rng(3)):
    unknown, known = rng.standard_normal((2, 7, 3)), rng.standard_normal((2, 11, 3))
    d2, idx = jt.knn(jt.array(unknown), jt.array(known), 4)
    assert d2.shape == idx.shape == (2, 7, 4) and idx.dtype == "int32" and d2.dtype == "float32"
    full = ((unknown[:, :, None] - known[:, None]) ** 2).sum(-1)
    np.testing.assert_array_equal(idx.numpy(), np.argsort(full, -1)[..., :4])
    np.testing.assert_allclose(d2.numpy(), np.sort(full, -1)[..., :4], rtol=1e-5)
    tie = jt.knn(jt.zeros(1, 1, 3), jt.ones(1, 3, 3), 2)[1]
    assert tie.numpy().tolist() == [[[0, 1]]]                  # equal distances: the first first
    with pytest.raises(ValueError, match=r"knn: k=5 must be an int in \[1, 3\]"):
        jt.knn(jt.zeros(1, 1, 3), jt.ones(1, 3, 3), 5)
    with pytest.raises(ValueError, match="must share b and c"):
        jt.knn(jt.zeros(1, 1, 3), jt.ones(2, 3, 3), 1)


# --- jt.candidate ----------------------------------------------------------------------------------
def _kept(x, fails):
    kept = []
    for i in range(len(x)):
        if not any(fails(x[j], x[i]) for j in kept):
            kept.append(i)
    return kept


IOU = ("std::max((Tx)0,std::min(@x(j,2)+@x(j,0),@x(i,2)+@x(i,0))-std::max(@x(j,0),@x(i,0)))"
       "*max((Tx)0,min(@x(j,3)+@x(j,1),@x(i,3)+@x(i,1))-max(@x(j,1),@x(i,1)))")


def _iou(s, c):
    inter = (max(0, min(s[2] + s[0], c[2] + c[0]) - max(s[0], c[0])) *
             max(0, min(s[3] + s[1], c[3] + c[1]) - max(s[1], c[1])))
    return inter / (s[2] * s[3] + c[2] * c[3] - inter)


@pytest.mark.parametrize("cond, fails, cols", [
    ("(@x(j,0)>@x(i,0))or(@x(j,1)>@x(i,1))or(@x(j,2)>@x(i,2))", lambda s, c: any(s[:3] > c[:3]), 3),
    ("(@x(j,0)>@x(i,0)) && (@x(j,1)>@x(i,1)) and not (@x(j,2)<=@x(i,2))", lambda s, c: all(s[:3] > c[:3]), 3),
    (f"{IOU}/(@x(j,2)*@x(j,3)+@x(i,2)*@x(i,3)-{IOU})<0.01", lambda s, c: _iou(s, c) < 0.01, 4),
    ("abs(@x(j,0) - @x(i,0)) < 0.05 ? true : std::sqrt(@x(i,1)) < 0.1f",
     lambda s, c: abs(s[0] - c[0]) < 0.05 or np.sqrt(c[1]) < 0.1, 2),
])
def test_candidate_keeps_what_a_greedy_loop_keeps(rng, cond, fails, cols):
    x = rng.random((1500, cols)).astype(np.float32)
    got = jt.candidate(jt.array(x), cond)
    assert got.dtype == "int32"
    np.testing.assert_array_equal(got.numpy(), _kept(x, fails))


def test_candidate_one_dim_int64_strided_and_empty():
    x = jt.array([3.0, 1.0, 4.0, 2.0, 5.0])
    assert jt.candidate(x, "@x(j) > @x(i)", dtype="int64").numpy().tolist() == [0, 2, 4]
    assert jt.candidate(x, "@x(j) > @x(i)", jt.int64).dtype == "int64"
    rows = jt.array(np.arange(12.0).reshape(3, 4)).transpose(1, 0)      # (4, 3), not contiguous
    assert jt.candidate(rows, "@x(i,2) - @x(j,1) > 5").numpy().tolist() == [0, 1]
    assert jt.candidate(jt.zeros((0, 2)), "@x(i,0) < @x(j,1)").shape == (0,)
    mixed = jt.array(np.array([[1, 2], [3, 4], [0, 0]], np.int32))
    assert jt.candidate(mixed, "max(@x(i,0), 0.5) < min(@x(j,1), 2)").numpy().tolist() == [0, 1]


@pytest.mark.parametrize("cond, why", [
    ('@x(i,0) > 0; system("id")', "unexpected character ';'"),
    ("std::system(0)", "std::system is not one of the functions"),
    ("getenv(0)", "unknown name 'getenv'"),
    ("@x(i,0) > (x[0] = 1)", "unexpected character '\\['"),
    ("@x(k,0) > 0", "first index must be i or j"),
    ("@x(i,3) > 0", "index 1 must be an integer in \\[0, 3\\)"),
    ("@x(i, 0+1) > 0", "expected \\), got \\+"),
    ("@x(i) > 0", "@x takes 2 indices \\(x has shape \\(4, 3\\)\\)"),
    ("@x(i,0) > > 1", "unexpected '>'"),
    ("(@x(i,0) > 1", "expected \\), got the end"),
    ("", "must be a non-empty string"),
])
def test_candidate_refuses_what_is_not_an_expression_over_x(cond, why):
    with pytest.raises(ValueError, match=why):
        jt.candidate(jt.zeros((4, 3)), cond)


def test_candidate_argument_errors():
    with pytest.raises(TypeError, match="dtype must be int32 or int64"):
        jt.candidate(jt.zeros((4, 3)), "@x(i,0) > @x(j,0)", "float32")
    with pytest.raises(ValueError, match="at least one dim"):
        jt.candidate(jt.array(1.0), "@x(i) > 0")
