"""Res2Net (Gao et al. 2019) with Jittor's builders (``res2net50``, ``res2net50_26w_4s``,
``res2net50_26w_6s``, ``res2net50_26w_8s``, ``res2net50_48w_2s``, ``res2net50_14w_8s``,
``res2net101_26w_4s`` and its alias ``res2net101``) and the reference implementation's parameter
names (``layer1.0.convs.0.weight``, ``layer1.0.bns.2.bias``, ``fc.weight``), which Jittor's and
timm's share, so their state dicts load by name.

A Res2Net bottleneck splits its 1x1-reduced features into ``scale`` groups of ``width``
channels; each group but the last passes a 3x3 convolution after adding the previous group's
output (hierarchical residual connections), and the groups are concatenated for the closing
1x1. The first block of each stage ('stage') takes the groups separately and average-pools the
last one. Builder names read ``<depth>_<baseWidth>w_<scale>s``.

    >>> import jtmini as jt
    >>> from jtmini.models import res2net50
    >>> res2net50(num_classes=10)(jt.randn(1, 3, 32, 32)).shape
    (1, 10)
"""
import math

from .. import init, nn
from ..ops.reindex import concat
from ._pretrained import check_images, check_pretrained
from .resnet import ResNet

__all__ = ["Res2Net", "Bottle2neck", "res2net50", "res2net50_26w_4s", "res2net50_26w_6s",
           "res2net50_26w_8s", "res2net50_48w_2s", "res2net50_14w_8s", "res2net101_26w_4s",
           "res2net101"]


class Bottle2neck(nn.Module):
    """Res2Net bottleneck from ``inplanes`` to ``planes * 4`` channels; ``stype`` 'stage' for a
    stage's first block, 'normal' otherwise; ``downsample`` matches the shortcut's shape.

        >>> Bottle2neck(256, 64)(jt.randn(1, 256, 4, 4)).shape
        (1, 256, 4, 4)
    """
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, baseWidth=26, scale=4, stype="normal"):
        if stype not in ("normal", "stage") or scale < 1:
            raise ValueError(f"Bottle2neck: stype must be 'normal' or 'stage' and scale >= 1, got "
                             f"stype={stype!r}, scale={scale}")
        width = int(math.floor(planes * (baseWidth / 64.0)))
        self.conv1 = nn.Conv2d(inplanes, width * scale, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width * scale)
        self.nums = 1 if scale == 1 else scale - 1
        if stype == "stage":
            self.pool = nn.AvgPool2d(kernel_size=3, stride=stride, padding=1)
        self.convs = nn.ModuleList([nn.Conv2d(width, width, kernel_size=3, stride=stride, padding=1, bias=False)
                                    for _ in range(self.nums)])
        self.bns = nn.ModuleList([nn.BatchNorm2d(width) for _ in range(self.nums)])
        self.conv3 = nn.Conv2d(width * scale, planes * self.expansion, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU()
        self.downsample = downsample
        self.stype, self.scale, self.width = stype, scale, width

    def _multi_scale(self, out):
        """The hierarchical 3x3 convolutions over the ``scale`` groups of ``out``'s channels."""
        spx = [out[:, i * self.width:(i + 1) * self.width] for i in range(self.scale)]
        pieces, sp = [], None
        for i in range(self.nums):
            sp = spx[i] if i == 0 or self.stype == "stage" else sp + spx[i]
            sp = self.relu(self.bns[i](self.convs[i](sp)))
            pieces.append(sp)
        if self.scale != 1:
            pieces.append(spx[self.nums] if self.stype == "normal" else self.pool(spx[self.nums]))
        return concat(pieces, dim=1)

    def execute(self, x):
        out = self._multi_scale(self.relu(self.bn1(self.conv1(x))))
        out = self.bn3(self.conv3(out))
        residual = x if self.downsample is None else self.downsample(x)
        return self.relu(out + residual)


class Res2Net(ResNet):
    """Res2Net with ``layers`` blocks per stage (4 stages), ``baseWidth`` and ``scale``, for
    ``num_classes``. Weights start as in the reference (He normal fan_out convolutions).

        >>> Res2Net(Bottle2neck, [1, 1, 1, 1], num_classes=5)(jt.randn(1, 3, 32, 32)).shape
        (1, 5)
    """

    def __init__(self, block, layers, baseWidth=26, scale=4, num_classes=1000):
        if len(layers) != 4:
            raise ValueError(f"Res2Net: layers must give 4 stages' block counts, got {list(layers)}")
        self.baseWidth, self.scale = baseWidth, scale
        super().__init__(block, layers, num_classes=num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def _block_shape(self, first, dilation):
        return dict(baseWidth=self.baseWidth, scale=self.scale, stype="stage" if first else "normal")

    def execute(self, x):
        check_images("Res2Net", x)
        return super().execute(x)


def _res2net(name, layers, base_width, scale, pretrained, kwargs):
    check_pretrained(name, pretrained)
    return Res2Net(Bottle2neck, layers, baseWidth=base_width, scale=scale, **kwargs)


def res2net50(pretrained=False, **kwargs):
    """Res2Net-50 (the 26w_4s form, 25.7M parameters): ``res2net50(num_classes=10)``."""
    return _res2net("res2net50", [3, 4, 6, 3], 26, 4, pretrained, kwargs)


def res2net50_26w_4s(pretrained=False, **kwargs):
    """Res2Net-50, base width 26, scale 4: ``res2net50_26w_4s(num_classes=10)``."""
    return _res2net("res2net50_26w_4s", [3, 4, 6, 3], 26, 4, pretrained, kwargs)


def res2net50_26w_6s(pretrained=False, **kwargs):
    """Res2Net-50, base width 26, scale 6: ``res2net50_26w_6s(num_classes=10)``."""
    return _res2net("res2net50_26w_6s", [3, 4, 6, 3], 26, 6, pretrained, kwargs)


def res2net50_26w_8s(pretrained=False, **kwargs):
    """Res2Net-50, base width 26, scale 8: ``res2net50_26w_8s(num_classes=10)``."""
    return _res2net("res2net50_26w_8s", [3, 4, 6, 3], 26, 8, pretrained, kwargs)


def res2net50_48w_2s(pretrained=False, **kwargs):
    """Res2Net-50, base width 48, scale 2: ``res2net50_48w_2s(num_classes=10)``."""
    return _res2net("res2net50_48w_2s", [3, 4, 6, 3], 48, 2, pretrained, kwargs)


def res2net50_14w_8s(pretrained=False, **kwargs):
    """Res2Net-50, base width 14, scale 8: ``res2net50_14w_8s(num_classes=10)``."""
    return _res2net("res2net50_14w_8s", [3, 4, 6, 3], 14, 8, pretrained, kwargs)


def res2net101_26w_4s(pretrained=False, **kwargs):
    """Res2Net-101, base width 26, scale 4: ``res2net101_26w_4s(num_classes=10)``."""
    return _res2net("res2net101_26w_4s", [3, 4, 23, 3], 26, 4, pretrained, kwargs)


res2net101 = res2net101_26w_4s
