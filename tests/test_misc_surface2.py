"""index_add, nn.Bilinear, make_grid/save_image and ctc_loss against PyTorch (and torchvision's
grid algorithm, written out here in torch), on random, broadcast and non-contiguous inputs."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as tF

import jtmini as jt
from jtmini import nn
from conftest import assert_var, check_grad


# --- index_add ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
def test_index_add_matches_torch(rng, dim, layout):
    x = rng.standard_normal((4, 5, 3))
    size = x.shape[dim]
    index = np.array([0, size - 1, 0, -1 + size, 1])      # repeats accumulate
    src_shape = list(x.shape)
    src_shape[dim] = len(index)
    src = rng.standard_normal(src_shape)
    t_index = torch.tensor(index)
    check_grad(lambda a, b: a.index_add(dim, jt.array(index), b),
               lambda a, b: a.index_add(dim, t_index, b), [x, src], layouts=[layout, layout], rng=rng)


def test_index_add_negative_index_alpha_and_dtype(rng):
    x = rng.integers(-5, 5, (3, 4))
    src = rng.integers(-5, 5, (3, 2))
    got = jt.array(x).index_add(1, jt.array([-1, 1]), jt.array(src), alpha=3)
    want = torch.tensor(x).index_add(1, torch.tensor([3, 1]), torch.tensor(src), alpha=3)
    assert_var(got, want.numpy())


def test_index_add_in_place_rebinds(rng):
    x = jt.array(np.ones((5, 3), np.float32))
    before = x * 1
    assert x.index_add_(0, jt.array([0, 4, 2]), jt.array(np.arange(9.0, dtype=np.float32).reshape(3, 3))) is x
    want = torch.ones(5, 3).index_add_(0, torch.tensor([0, 4, 2]), torch.arange(9.0).reshape(3, 3))
    assert_var(x, want.numpy())
    assert_var(before, np.ones((5, 3), np.float32))      # earlier Vars keep the old value


def test_index_add_errors():
    x = jt.zeros(3, 4)
    with pytest.raises(ValueError, match=r"source of shape \(2, 4\).*\(3, 4\).*length 3"):
        x.index_add(0, jt.array([0, 1, 2]), jt.zeros(2, 4))
    with pytest.raises(IndexError, match="index 3 is out of range for dim 0 with size 3"):
        x.index_add(0, jt.array([3]), jt.zeros(1, 4))
    with pytest.raises(ValueError, match="index must be 1-D"):
        x.index_add(0, jt.array([[0]]), jt.zeros(1, 4))
    with pytest.raises(ValueError, match="0-d"):
        jt.array(1.0).index_add(0, jt.array([0]), jt.array([1.0]))


# --- Bilinear ----------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
def test_bilinear_matches_torch(rng, layout):
    a, b = rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    w, bias = rng.standard_normal((5, 4, 3)), rng.standard_normal(5)
    check_grad(nn.bilinear, tF.bilinear, [a, b, w, bias], layouts=[layout, layout, "contig", "contig"], rng=rng)


def test_bilinear_leading_dims_and_no_bias(rng):
    a, b, w = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 2)), rng.standard_normal((5, 4, 2))
    check_grad(lambda p, q, r: nn.bilinear(p, q, r), lambda p, q, r: tF.bilinear(p, q, r), [a, b, w], rng=rng)


def test_bilinear_module_init_and_value(rng):
    m = nn.Bilinear(20, 30, 40)
    bound = 1 / math.sqrt(20)
    assert m.weight.shape == (40, 20, 30) and m.bias.shape == (40,)
    assert np.abs(m.weight.numpy()).max() <= bound and np.abs(m.bias.numpy()).max() <= bound
    assert m.weight.numpy().std() > bound / 3                  # spread over the range, not constant
    assert sorted(name for name, _ in m.named_parameters()) == ["bias", "weight"]
    x1, x2 = rng.standard_normal((8, 20)).astype(np.float32), rng.standard_normal((8, 30)).astype(np.float32)
    want = tF.bilinear(torch.tensor(x1), torch.tensor(x2), torch.tensor(m.weight.numpy()), torch.tensor(m.bias.numpy()))
    assert_var(m(jt.array(x1), jt.array(x2)), want.numpy(), atol=1e-5, rtol=1e-4)
    assert nn.Bilinear(2, 3, 4, bias=False).bias is None


def test_bilinear_errors():
    with pytest.raises(ValueError, match=r"shapes \(4, 2\) and \(4, 3\).*\(5, 3, 3\)"):
        nn.bilinear(jt.zeros(4, 2), jt.zeros(4, 3), jt.zeros(5, 3, 3))
    with pytest.raises(ValueError, match=r"shapes \(4, 2\) and \(3, 3\)"):
        nn.bilinear(jt.zeros(4, 2), jt.zeros(3, 3), jt.zeros(5, 2, 3))


# --- make_grid / save_image --------------------------------------------------------------------
def torchvision_make_grid(t, nrow=8, padding=2, normalize=False, value_range=None, scale_each=False, pad_value=0.0):
    """torchvision.utils.make_grid's algorithm (torchvision 0.x), written out with torch."""
    if t.dim() == 2:
        t = t.unsqueeze(0)
    if t.dim() == 3:
        t = torch.cat((t, t, t), 0) if t.size(0) == 1 else t
        t = t.unsqueeze(0)
    if t.dim() == 4 and t.size(1) == 1:
        t = torch.cat((t, t, t), 1)
    if normalize:
        t = t.clone()

        def norm(img, low, high):
            img.clamp_(min=low, max=high)
            img.sub_(low).div_(max(high - low, 1e-5))
        for img in (t if scale_each else [t]):
            norm(img, *(value_range or (float(img.min()), float(img.max()))))
    if t.size(0) == 1:
        return t.squeeze(0)
    nmaps = t.size(0)
    xmaps = min(nrow, nmaps)
    ymaps = int(math.ceil(float(nmaps) / xmaps))
    height, width = t.size(2) + padding, t.size(3) + padding
    grid = t.new_full((t.size(1), height * ymaps + padding, width * xmaps + padding), pad_value)
    k = 0
    for y in range(ymaps):
        for x in range(xmaps):
            if k >= nmaps:
                break
            grid[:, y * height + padding:(y + 1) * height, x * width + padding:(x + 1) * width] = t[k]
            k += 1
    return grid


@pytest.mark.parametrize("shape, kwargs", [
    ((16, 3, 10, 10), {}),
    ((16, 3, 10, 10), dict(nrow=3, padding=4, pad_value=-1)),
    ((7, 3, 5, 6), dict(nrow=3, normalize=True, padding=4, pad_value=-1)),
    ((7, 3, 5, 6), dict(nrow=2, normalize=True, value_range=(-1, 1))),
    ((5, 2, 4, 4), dict(normalize=True, scale_each=True, padding=0)),
    ((4, 1, 6, 5), dict(nrow=2)),
    ((1, 3, 7, 8), {}), ((3, 7, 8), dict(normalize=True)), ((1, 7, 8), {}), ((7, 8), {}),
])
def test_make_grid_matches_torchvision(rng, shape, kwargs):
    arr = rng.standard_normal(shape).astype(np.float32)
    want = torchvision_make_grid(torch.tensor(arr), **kwargs).numpy()
    assert_var(jt.make_grid(jt.array(arr), **kwargs), want, atol=1e-6)


def test_make_grid_list_jittor_range_and_misc_name(rng):
    imgs = [rng.standard_normal((3, 4, 4)).astype(np.float32) for _ in range(3)]
    want = torchvision_make_grid(torch.tensor(np.stack(imgs)), normalize=True, value_range=(-2, 2)).numpy()
    got = jt.misc.make_grid([jt.array(i) for i in imgs], normalize=True, range=(-2, 2))
    assert_var(got, want, atol=1e-6)


def test_make_grid_gradient_reaches_images(rng):
    arr = rng.standard_normal((3, 2, 3, 3))
    check_grad(lambda a: jt.make_grid(a, nrow=2, padding=1), lambda a: torchvision_make_grid(a, nrow=2, padding=1),
               [arr], layouts=["transposed"], rng=rng)


def test_make_grid_errors():
    with pytest.raises(ValueError, match=r"\(B, C, H, W\).*got \(1, 2, 3, 4, 5\)"):
        jt.make_grid(jt.zeros(1, 2, 3, 4, 5))
    with pytest.raises(TypeError, match="ndarray"):
        jt.make_grid(np.zeros((2, 3, 4, 4)))
    with pytest.raises(ValueError, match="range must be a"):
        jt.make_grid(jt.zeros(2, 3, 4, 4), normalize=True, range=1)


@pytest.mark.parametrize("name", ["grid.png", "grid.jpg"])
def test_save_image_writes_the_grid(rng, tmp_path, name):
    from PIL import Image
    arr = rng.uniform(-0.2, 1.2, (5, 3, 6, 7)).astype(np.float32)
    jt.save_image(jt.array(arr), str(tmp_path / name), nrow=3)
    grid = torchvision_make_grid(torch.tensor(arr), nrow=3)
    want = grid.mul(255).add_(0.5).clamp_(0, 255).permute(1, 2, 0).to(torch.uint8).numpy()
    with Image.open(tmp_path / name) as im:
        got = np.asarray(im)
        assert im.format == ("PNG" if name.endswith("png") else "JPEG")
    assert got.shape == want.shape
    if name.endswith("jpg"):                  # lossy: what Pillow makes of torchvision's pixels
        Image.fromarray(want).save(tmp_path / "want.jpg")
        with Image.open(tmp_path / "want.jpg") as im:
            want = np.asarray(im)
    np.testing.assert_array_equal(got, want)


# --- ctc_loss ----------------------------------------------------------------------------------
def ctc_case(rng, steps, classes, batch, size, min_size, short_inputs=False):
    logits = rng.standard_normal((steps, batch, classes))
    targets = rng.integers(1, classes, (batch, size))
    target_lengths = rng.integers(min_size, size + 1, batch)
    low = max(2 * int(target_lengths.max()) + 1, 1) if not short_inputs else 1
    input_lengths = rng.integers(min(low, steps), steps + 1, batch)
    return logits, targets, input_lengths, target_lengths


def check_ctc(logits, targets, input_lengths, target_lengths, dtype="float32", layout="contig", **kw):
    """Loss and gradient (with respect to the logits, through log_softmax) against PyTorch's float64;
    "mean" is Jittor's, the mean of the losses (PyTorch's divides each by its target length first)."""
    args = [torch.tensor(v) for v in (targets, input_lengths, target_lengths)]
    jittor_mean = kw.get("reduction") == "mean"
    t_kw = dict(kw, reduction="none") if jittor_mean else kw
    check_grad(lambda x: jt.ctc_loss(x.log_softmax(2), *[jt.array(v) for v in (targets, input_lengths, target_lengths)], **kw),
               lambda x: (lambda out: out.mean() if jittor_mean else out)(tF.ctc_loss(x.log_softmax(2), *args, **t_kw)),
               [logits], layouts=[layout], dtype=dtype, rng=np.random.default_rng(0))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("layout", ["contig", "transposed"])
def test_ctc_loss_matches_torch(rng, reduction, layout):
    check_ctc(*ctc_case(rng, 20, 6, 4, 6, 1), layout=layout, reduction=reduction)


def test_ctc_loss_jittor_sizes_float64(rng):
    check_ctc(*ctc_case(rng, 2, 2, 1, 1, 1), dtype="float64", reduction="none")
    check_ctc(*ctc_case(rng, 50, 20, 16, 30, 10), dtype="float64", reduction="none")


def test_ctc_loss_repeats_blank_and_empty_targets(rng):
    logits = rng.standard_normal((9, 3, 4))
    targets = np.array([[2, 2, 2], [1, 0, 0], [3, 1, 3]])    # repeats need a blank between them
    check_ctc(logits, targets, np.array([9, 7, 8]), np.array([3, 0, 3]), blank=0, reduction="none")
    check_ctc(logits, targets, np.array([9, 7, 8]), np.array([3, 1, 2]), blank=0,
              reduction="sum")
    nonzero_blank = np.where(targets == 2, 0, targets)       # blank 2: labels 0, 1, 3
    check_ctc(logits, nonzero_blank, np.array([9, 9, 6]), np.array([3, 2, 3]), blank=2, reduction="none")


def test_ctc_loss_concatenated_targets_and_module(rng):
    logits, targets, input_lengths, target_lengths = ctc_case(rng, 15, 5, 3, 4, 0)
    flat = np.concatenate([t[:n] for t, n in zip(targets, target_lengths)])
    lp = torch.tensor(logits).log_softmax(2)
    want = tF.ctc_loss(lp, torch.tensor(flat), torch.tensor(input_lengths), torch.tensor(target_lengths),
                       reduction="none").mean()           # Jittor's mean: of the losses
    got = nn.CTCLoss()(jt.array(logits).log_softmax(2), jt.array(flat), jt.array(input_lengths), target_lengths)
    assert_var(got, want.numpy(), rtol=1e-7)


def test_ctc_loss_impossible_alignments(rng):
    logits = rng.standard_normal((3, 2, 4))
    targets, input_lengths, target_lengths = np.array([[1, 1, 2], [1, 2, 3]]), np.array([3, 3]), np.array([3, 3])
    lp = torch.tensor(logits, requires_grad=True)
    want = tF.ctc_loss(lp.log_softmax(2), torch.tensor(targets), torch.tensor(input_lengths),
                       torch.tensor(target_lengths), reduction="none")
    got = jt.ctc_loss(jt.array(logits).log_softmax(2), targets, input_lengths, target_lengths, reduction="none")
    assert_var(got, want.detach().numpy())            # [inf, finite]: 1,1,2 needs 4 steps
    assert np.isinf(got.numpy()[0]) and np.isfinite(got.numpy()[1])
    check_ctc(logits, targets, input_lengths, target_lengths, zero_infinity=True, reduction="sum")


def test_ctc_loss_empty_inputs(rng):
    logits = rng.standard_normal((4, 3, 3))
    targets, input_lengths, target_lengths = [[1, 2], [1, 1], [2, 2]], [0, 0, 4], [0, 1, 2]
    want = tF.ctc_loss(torch.tensor(logits).log_softmax(2), torch.tensor(targets), torch.tensor(input_lengths),
                       torch.tensor(target_lengths), reduction="none")
    got = jt.ctc_loss(jt.array(logits).log_softmax(2), targets, input_lengths, target_lengths, reduction="none")
    assert_var(got, want.numpy())          # [0, inf, finite]: no step reads only the empty target


def test_ctc_loss_errors():
    lp = jt.zeros(5, 2, 3)
    with pytest.raises(ValueError, match=r"\(T, N, C\).*\(5, 2\)"):
        jt.ctc_loss(jt.zeros(5, 2), [[1], [1]], [5, 5], [1, 1])
    with pytest.raises(ValueError, match=r"must both have shape \(2,\)"):
        jt.ctc_loss(lp, [[1], [1]], [5], [1, 1])
    with pytest.raises(ValueError, match=r"input_lengths must lie in \[0, 5\]"):
        jt.ctc_loss(lp, [[1], [1]], [6, 5], [1, 1])
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 3\)"):
        jt.ctc_loss(lp, [[3], [1]], [5, 5], [1, 1])
    with pytest.raises(ValueError, match="sum\\(target_lengths\\) = 3"):
        jt.ctc_loss(lp, [1, 2], [5, 5], [1, 2])
    with pytest.raises(ValueError, match="reduction must be"):
        jt.ctc_loss(lp, [[1], [1]], [5, 5], [1, 1], reduction="avg")
