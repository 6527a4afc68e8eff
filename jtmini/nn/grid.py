"""Spatial transformers: ``affine_grid`` builds a sampling grid from affine matrices and
``grid_sample`` reads an image at the grid's points, both with PyTorch's (and Jittor's) semantics
for 4-d (N, C, H, W) and 5-d (N, C, D, H, W) inputs.

Grid points are normalised to [-1, 1] per spatial dim, x first (the last dim of the image). The
sampling is composed from elementwise ops and ``reindex`` gathers whose indices are computed Vars,
so its gradient flows to the image (through the gathers) and to the grid (through the weights).

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> theta = jt.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])      # the identity
    >>> x = jt.randn(1, 3, 4, 5)
    >>> y = nn.grid_sample(x, nn.affine_grid(theta, (1, 3, 4, 5)))
    >>> float((y - x).abs().max()) < 1e-5
    True
"""
import numpy as np

from .. import creation, dtypes
from ..ops.elementwise import where
from ..ops.reindex import reindex
from ..var import Var

GRID_MODES = ("bilinear", "nearest")
PADDING_MODES = ("zeros", "border", "reflection")


def _linspace(steps, align_corners, dtype):
    """PyTorch's normalised pixel positions along a dim of ``steps`` pixels: their centres when
    not ``align_corners`` (so the image edge is at -1 and 1), the corner pixels at -1 and 1 when it
    is; a single pixel sits at 0."""
    if steps <= 1:
        return np.zeros(max(steps, 1), dtype)
    points = np.linspace(-1, 1, steps, dtype=dtype)
    return points if align_corners else (points * ((steps - 1) / steps)).astype(dtype)


def _check_theta(theta, size):
    if not isinstance(theta, Var) or not dtypes.is_float(theta.dtype):
        what = theta.dtype if isinstance(theta, Var) else type(theta).__name__
        raise TypeError(f"affine_grid: theta must be a float Var, got {what}")
    size = tuple(int(s) for s in size)
    if len(size) not in (4, 5):
        raise ValueError(f"affine_grid: size must be (N, C, H, W) or (N, C, D, H, W), got {size}")
    d = len(size) - 2
    if tuple(theta.shape) != (size[0], d, d + 1):
        raise ValueError(f"affine_grid: theta for size {size} must have shape ({size[0]}, {d}, {d + 1}), "
                         f"got {tuple(theta.shape)}")
    return size


def affine_grid(theta, size, align_corners=False):
    """The (N, H, W, 2) (or (N, D, H, W, 3)) grid of ``theta @ [x, y, (z,) 1]`` over the normalised
    pixel positions of an output of ``size`` (N, C, H, W) (or (N, C, D, H, W)); ``theta`` is
    (N, 2, 3) (or (N, 3, 4)). Feed it to ``grid_sample``.

    >>> nn.affine_grid(jt.array([[[2.0, 0, 0], [0, 1, 0]]]), (1, 1, 2, 2), align_corners=True)[0, 0].numpy()
    array([[-2., -1.],
           [ 2., -1.]], dtype=float32)
    """
    size = _check_theta(theta, size)
    spatial, d = size[2:], len(size) - 2
    axes = [_linspace(s, align_corners, theta.dtype) for s in reversed(spatial)]   # x, y, (z)
    mesh = np.meshgrid(*axes[::-1], indexing="ij")[::-1]                           # x, y, (z) over (D,) H, W
    base = np.stack([*mesh, np.ones(spatial, theta.dtype)], axis=-1)
    base = creation.array(base.reshape(1, *spatial, 1, d + 1), theta.dtype)
    return (base * theta.reshape(size[0], *[1] * d, d, d + 1)).sum(dims=-1)


def _reflect(c, twice_low, twice_high):
    """``c`` folded back into [twice_low/2, twice_high/2] by mirroring at its ends (PyTorch's
    reflect_coordinates)."""
    if twice_low == twice_high:
        return c * 0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    c = (c - low).abs()
    extra, flips = c.mod(span), (c / span).floor()
    return where(flips.mod(2) == 0, extra + low, span - extra + low)


def _source(coord, size, padding_mode, align_corners):
    """A normalised grid coordinate as a pixel position in a dim of ``size`` pixels."""
    if align_corners:
        c = (coord + 1) * ((size - 1) / 2)
    else:
        c = ((coord + 1) * size - 1) / 2
    if padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
    if padding_mode != "zeros":
        c = c.clamp(0, size - 1)
    return c


def _gather(x, indices):
    """``x[n, c, indices[0][n, o..], indices[1][n, o..], ..]`` for every output point o; zero where
    an index falls outside ``x``."""
    out = indices[0].shape[1:]
    names = ",".join(f"i{k + 2}" for k in range(len(out)))
    exprs = ["i0", "i1"] + [f"@e{k}(i0,{names})" for k in range(len(indices))]
    return reindex(x, [x.shape[0], x.shape[1], *out], exprs, extras=[i.cast("int32") for i in indices])


def _check_sample(x, grid, mode, padding_mode):
    for name, v in (("input", x), ("grid", grid)):
        if not isinstance(v, Var) or not dtypes.is_float(v.dtype):
            what = v.dtype if isinstance(v, Var) else type(v).__name__
            raise TypeError(f"grid_sample: {name} must be a float Var, got {what}")
    if x.ndim not in (4, 5) or grid.ndim != x.ndim or grid.shape[-1] != x.ndim - 2 \
            or grid.shape[0] != x.shape[0]:
        raise ValueError(f"grid_sample: input (N, C, H, W) needs grid (N, H', W', 2), (N, C, D, H, W) "
                         f"needs (N, D', H', W', 3); got input {x.shape} and grid {grid.shape}")
    if mode not in GRID_MODES:
        raise ValueError(f"grid_sample: mode must be one of {', '.join(GRID_MODES)}, got {mode!r}")
    if padding_mode not in PADDING_MODES:
        raise ValueError(f"grid_sample: padding_mode must be one of {', '.join(PADDING_MODES)}, "
                         f"got {padding_mode!r}")


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    """``input`` (N, C, H, W) read at the (N, H', W', 2) normalised points of ``grid`` (x, y in
    [-1, 1]; 5-d input takes (N, D', H', W', 3) with x, y, z), giving (N, C, H', W'). ``mode`` is
    "bilinear" or "nearest"; points outside read zeros, the border pixel, or the mirrored image
    (``padding_mode`` "zeros", "border", "reflection").

    >>> x = jt.array(np.arange(4.0).reshape(1, 1, 2, 2))
    >>> nn.grid_sample(x, jt.array([[[[0.0, 0.0]]]])).numpy().ravel()
    array([1.5], dtype=float32)
    """
    _check_sample(input, grid, mode, padding_mode)
    d = input.ndim - 2
    coords = [_source(grid[..., d - 1 - k], input.shape[2 + k], padding_mode, align_corners)
              for k in range(d)]                      # in the input's dim order: (z,) y, x
    if mode == "nearest":
        return _gather(input, [c.round() for c in coords])
    lows = [c.floor() for c in coords]
    fracs = [c - low for c, low in zip(coords, lows)]
    out = None
    for corner in np.ndindex(*[2] * d):
        weight = None
        for k, b in enumerate(corner):
            w = fracs[k] if b else 1 - fracs[k]
            weight = w if weight is None else weight * w
        term = _gather(input, [low + b for low, b in zip(lows, corner)]) * weight.unsqueeze(1)
        out = term if out is None else out + term
    return out


__all__ = ["affine_grid", "grid_sample"]
