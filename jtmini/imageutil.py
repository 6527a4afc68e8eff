"""Image grids: ``jt.make_grid`` tiles a batch of images into one, ``jt.save_image`` writes that
grid as a picture file (Pillow), both with torchvision's semantics, as Jittor's follow them.

    >>> jt.make_grid(jt.zeros(4, 3, 8, 8), nrow=2, padding=1).shape
    (3, 19, 19)
"""
import math

import numpy as np

from . import creation
from .ops.reindex import concat, reindex, stack
from .var import Var


def make_grid(x, nrow=8, padding=2, normalize=False, range=None, scale_each=False, pad_value=0,
              value_range=None):
    """Tile images ``(B, C, H, W)`` (or a list of ``(C, H, W)``; a ``(C, H, W)`` or ``(H, W)`` is one
    image) into one ``(C, rows * (H + padding) + padding, cols * (W + padding) + padding)``, ``nrow``
    images per row, gaps filled with ``pad_value``. One-channel images become three, as torchvision's.
    ``normalize`` maps ``range`` (``value_range``; default min..max, of each image if ``scale_each``)
    to 0..1, clamping outside it.

    >>> jt.make_grid(jt.ones(3, 1, 2, 2), nrow=2, padding=1).shape
    (3, 7, 7)
    """
    x = _as_batch(x)
    value_range = range if value_range is None else value_range
    if value_range is not None and (not isinstance(value_range, (tuple, list)) or len(value_range) != 2):
        raise ValueError(f"make_grid: range must be a (low, high) pair, got {value_range!r}")
    if normalize:
        x = _normalized(x, value_range, scale_each)
    if x.shape[0] == 1:
        return x.reshape(x.shape[1:])
    batch, channels, height, width = x.shape
    cols = min(int(nrow), batch)
    rows = math.ceil(batch / cols)
    cell_h, cell_w = height + padding, width + padding
    shape = [channels, rows * cell_h + padding, cols * cell_w + padding]
    # a pixel's cell gives its image; a negative position inside the cell is the gap (overflow)
    exprs = [f"i1/{cell_h}*{cols}+i2/{cell_w}", "i0",
             f"i1-i1/{cell_h}*{cell_h}-{padding}", f"i2-i2/{cell_w}*{cell_w}-{padding}"]
    return reindex(x, shape, exprs, overflow_value=pad_value)


def _as_batch(x):
    """``x`` as ``(B, C, H, W)`` with one channel made three; TypeError/ValueError naming its shape."""
    if isinstance(x, (list, tuple)):
        x = stack(list(x))
    if not isinstance(x, Var):
        raise TypeError(f"make_grid: expected a Var or a list of Vars, got {type(x).__name__}")
    if x.ndim == 2:
        x = x.reshape((1,) + tuple(x.shape))
    if x.ndim == 3:
        x = x.reshape((1,) + tuple(x.shape))
    if x.ndim != 4:
        raise ValueError(f"make_grid: expected images of shape (B, C, H, W), (C, H, W) or (H, W), got {x.shape}")
    return concat([x, x, x], 1) if x.shape[1] == 1 else x


def _normalized(x, value_range, scale_each):
    """``x`` clamped to its range and mapped to 0..1 (the range at least 1e-5 wide)."""
    if value_range is not None:
        low, high = (creation.as_var(v, like=x) for v in value_range)
    elif scale_each:
        low, high = x.min(dims=(1, 2, 3), keepdims=True), x.max(dims=(1, 2, 3), keepdims=True)
    else:
        low, high = x.min(), x.max()
    return (x.clamp(low, high) - low) / (high - low).maximum(1e-5)


def save_image(x, filepath, nrow=8, padding=2, normalize=False, range=None, scale_each=False,
               pad_value=0, format=None, value_range=None):
    """``make_grid(x, ...)`` written as a picture file: values 0..1 become 0..255 (rounded,
    clamped); the file's type comes from its name or ``format`` (Pillow's).

    >>> jt.save_image(jt.rand(4, 3, 8, 8), "/tmp/grid.png", nrow=2)
    """
    from PIL import Image       # here: Pillow is needed only to write files
    grid = make_grid(x, nrow=nrow, padding=padding, normalize=normalize, range=range,
                     scale_each=scale_each, pad_value=pad_value, value_range=value_range)
    pixels = np.clip(grid.numpy().astype(np.float64) * 255 + 0.5, 0, 255).astype(np.uint8)
    pixels = np.transpose(pixels, (1, 2, 0)) if pixels.ndim == 3 else pixels
    Image.fromarray(pixels[:, :, 0] if pixels.ndim == 3 and pixels.shape[2] == 1 else pixels).save(
        filepath, format=format)
