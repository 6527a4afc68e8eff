"""Point-cloud losses, Jittor's ``jt.loss3d``: the chamfer distance and the (approximate) earth
mover's distance between batches of 3-D point clouds, both on any backend and differentiable.

    >>> import jtmini as jt
    >>> from jtmini.loss3d import chamfer_loss, earth_mover_distance
    >>> a, b = jt.rand(2, 64, 3), jt.rand(2, 48, 3)
    >>> chamfer_loss(a, b).shape, earth_mover_distance(a, b, reduction=None).shape
    ((), (2,))
"""
from . import creation
from .nn.module import Module
from .var import Var


def _clouds(pc1, pc2, dims, who):
    """Both clouds as (batch, points, 3), checked."""
    if dims not in ("BNC", "BCN"):
        raise ValueError(f"{who}: dims must be 'BNC' or 'BCN', got {dims!r}")
    for name, pc in (("pc1", pc1), ("pc2", pc2)):
        if not isinstance(pc, Var):
            raise TypeError(f"{who}: {name} must be a Var, got {type(pc).__name__}")
        xyz = pc.shape[2] if dims == "BNC" and pc.ndim == 3 else pc.shape[1] if pc.ndim == 3 else None
        if xyz != 3:
            raise ValueError(f"{who}: {name} must have shape [{', '.join(dims)}] with C = 3 (dims={dims!r}), "
                             f"got {pc.shape}")
    if dims == "BCN":
        pc1, pc2 = pc1.permute(0, 2, 1), pc2.permute(0, 2, 1)
    if pc1.shape[0] != pc2.shape[0]:
        raise ValueError(f"{who}: pc1 and pc2 must have one batch size, got {pc1.shape} and {pc2.shape}")
    return pc1, pc2


def _squared_distances(pc1, pc2):
    """(batch, N, M): the squared distance from every point of pc1 to every point of pc2."""
    b, n, m = pc1.shape[0], pc1.shape[1], pc2.shape[1]
    diff = pc1.reshape(b, n, 1, 3) - pc2.reshape(b, 1, m, 3)
    return (diff * diff).sum(-1)


def _reduce(value, reduction, who):
    if reduction is None:
        return value
    if reduction == "sum":
        return value.sum()
    if reduction == "mean":
        return value.mean()
    raise ValueError(f"{who}: reduction must be 'mean', 'sum' or None, got {reduction!r}")


def chamfer_loss(pc1, pc2, reduction="mean", dims="BNC", bidirectional=False):
    """For every point of ``pc1`` the distance to its nearest point of ``pc2`` (batch, N),
    reduced by ``reduction`` ('mean', 'sum' or None); ``bidirectional`` adds the loss from
    ``pc2`` to ``pc1``. ``dims``: 'BNC' for (batch, points, xyz) or 'BCN' for (batch, xyz, points).

    >>> chamfer_loss(jt.rand(4, 100, 3), jt.rand(4, 80, 3), bidirectional=True).item()
    """
    if bidirectional:
        return chamfer_loss(pc1, pc2, reduction, dims) + chamfer_loss(pc2, pc1, reduction, dims)
    pc1, pc2 = _clouds(pc1, pc2, dims, "chamfer_loss")
    # the gradient of min flows to the nearest point only, as through Jittor's gathered neighbours
    return _reduce(_squared_distances(pc1, pc2).min(-1).sqrt(), reduction, "chamfer_loss")


class ChamferLoss(Module):
    """``chamfer_loss`` as a layer, its options given once.

    >>> ChamferLoss(dims="BNC", bidirectional=True)(jt.rand(2, 50, 3), jt.rand(2, 50, 3)).shape
    ()
    """

    def __init__(self, reduction="mean", dims="BNC", bidirectional=False):
        self.reduction, self.dims, self.bidirectional = reduction, dims, bidirectional

    def execute(self, pc1, pc2):
        return chamfer_loss(pc1, pc2, self.reduction, self.dims, self.bidirectional)


def _approx_match(dist, n, m):
    """Jittor's (Fan et al.'s) approximate transport plan, (batch, N, M): ten rounds of soft
    assignment at sharpening scales -4^7 .. -1, then 0, each spending the mass both sides have left.
    Each point of the smaller cloud carries ``max(n, m) // min(n, m)`` units (integer division, as
    Jittor), each of the larger one unit."""
    b = dist.shape[0]
    remain_l = creation.full((b, n, 1), 1.0 if n >= m else float(m // n), dtype=dist.dtype)
    remain_r = creation.full((b, 1, m), float(n // m) if n >= m else 1.0, dtype=dist.dtype)
    match = None
    for j in range(7, -3, -1):
        weight = (dist * -(4.0 ** j)).exp() if j > -2 else dist * 0 + 1
        ratio_l = remain_l / ((weight * remain_r).sum(-1, keepdims=True) + 1e-9)
        sum_r = (weight * ratio_l).sum(1, keepdims=True) * remain_r
        ratio_r = (remain_r / (sum_r + 1e-9)).minimum(1.0) * remain_r
        remain_r = (remain_r - sum_r).maximum(0.0)
        step = weight * ratio_l * ratio_r
        match = step if match is None else match + step
        remain_l = (remain_l - step.sum(-1, keepdims=True)).maximum(0.0)
    return match


def earth_mover_distance(pc1, pc2, reduction="mean", dims="BNC"):
    """The earth mover's distance from ``pc1`` to ``pc2`` as Jittor computes it: the cost, in
    squared distances, of the approximate transport plan of ``_approx_match``, per batch item
    (batch,), reduced by ``reduction`` ('mean', 'sum' or None). The gradient treats the plan as
    fixed, as Jittor's does. ``dims`` as for ``chamfer_loss``.

    >>> earth_mover_distance(jt.rand(2, 100, 3), jt.rand(2, 50, 3)).shape
    ()
    """
    pc1, pc2 = _clouds(pc1, pc2, dims, "earth_mover_distance")
    dist = _squared_distances(pc1, pc2)
    match = _approx_match(dist.detach(), pc1.shape[1], pc2.shape[1]).detach()
    return _reduce((dist * match).sum((1, 2)), reduction, "earth_mover_distance")


class EarthMoverDistance(Module):
    """``earth_mover_distance`` as a layer: ``EarthMoverDistance(dims='BNC')(pc1, pc2)``."""

    def __init__(self, reduction="mean", dims="BNC"):
        self.reduction, self.dims = reduction, dims

    def execute(self, pc1, pc2):
        return earth_mover_distance(pc1, pc2, self.reduction, self.dims)
