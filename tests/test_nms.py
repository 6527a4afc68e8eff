"""``jt.nms`` (Jittor's non-maximum suppression) against a plain greedy loop over the kept boxes."""
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
