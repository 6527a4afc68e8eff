"""MNASNet B1 (Tan et al. 2019, torchvision's version 2) with Jittor's builders (``mnasnet0_5``,
``mnasnet0_75``, ``mnasnet1_0``, ``mnasnet1_3``) and torchvision's layout and parameter names
(``layers.0.weight``, ``layers.8.0.layers.3.weight``, ``classifier.1.bias``), so torchvision's
state dicts load by name.

A depthwise-separable stem, six stacks of inverted residuals (3x3 or 5x5 depthwise, expansion 3
or 6), a 1x1 convolution to 1280 channels, global average pooling, dropout and the classifier;
``alpha`` scales every width but the last (rounded to multiples of 8). Unlike Jittor's file, the
stem scales with ``alpha`` too, as in torchvision's version 2 (the two agree at ``alpha=1``).

    >>> import jtmini as jt
    >>> from jtmini.models import mnasnet0_5
    >>> mnasnet0_5(num_classes=10)(jt.randn(1, 3, 32, 32)).shape
    (1, 10)
"""
from .. import init, nn
from ._pretrained import check_images, check_pretrained

__all__ = ["MNASNet", "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3"]

# PyTorch's momentum of TensorFlow's BatchNorm decay 0.9997, as torchvision's
_BN_MOMENTUM = 1 - 0.9997


class _InvertedResidual(nn.Module):
    def __init__(self, in_ch, out_ch, kernel_size, stride, expansion_factor, bn_momentum=0.1):
        if stride not in (1, 2) or kernel_size not in (3, 5):
            raise ValueError(f"MNASNet block: stride must be 1 or 2 and kernel_size 3 or 5, got "
                             f"stride={stride}, kernel_size={kernel_size}")
        mid_ch = in_ch * expansion_factor
        self.apply_residual = in_ch == out_ch and stride == 1
        self.layers = nn.Sequential(
            nn.Conv2d(in_ch, mid_ch, 1, bias=False), nn.BatchNorm2d(mid_ch, momentum=bn_momentum),
            nn.ReLU(),
            nn.Conv2d(mid_ch, mid_ch, kernel_size, padding=kernel_size // 2, stride=stride,
                      groups=mid_ch, bias=False),
            nn.BatchNorm2d(mid_ch, momentum=bn_momentum), nn.ReLU(),
            nn.Conv2d(mid_ch, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch, momentum=bn_momentum))

    def execute(self, x):
        return self.layers(x) + x if self.apply_residual else self.layers(x)


def _stack(in_ch, out_ch, kernel_size, stride, exp_factor, repeats, bn_momentum):
    """``repeats`` blocks; only the first changes width and stride."""
    blocks = [_InvertedResidual(in_ch, out_ch, kernel_size, stride, exp_factor, bn_momentum)]
    blocks += [_InvertedResidual(out_ch, out_ch, kernel_size, 1, exp_factor, bn_momentum)
               for _ in range(1, repeats)]
    return nn.Sequential(*blocks)


def _round_to_multiple_of(val, divisor, round_up_bias=0.9):
    """``val`` rounded to a multiple of ``divisor``, rounded up where rounding down loses > 10%."""
    new_val = max(divisor, int(val + divisor / 2) // divisor * divisor)
    return new_val if new_val >= round_up_bias * val else new_val + divisor


def _get_depths(alpha):
    return [_round_to_multiple_of(depth * alpha, 8) for depth in (32, 16, 24, 40, 80, 96, 192, 320)]


def _layers(depths):
    """torchvision's ``layers`` list: stem, six stacks, the 1x1 convolution to 1280 channels."""
    bn = lambda c: nn.BatchNorm2d(c, momentum=_BN_MOMENTUM)   # noqa: E731
    return [nn.Conv2d(3, depths[0], 3, padding=1, stride=2, bias=False), bn(depths[0]), nn.ReLU(),
            nn.Conv2d(depths[0], depths[0], 3, padding=1, stride=1, groups=depths[0], bias=False),
            bn(depths[0]), nn.ReLU(),
            nn.Conv2d(depths[0], depths[1], 1, padding=0, stride=1, bias=False), bn(depths[1]),
            _stack(depths[1], depths[2], 3, 2, 3, 3, _BN_MOMENTUM),
            _stack(depths[2], depths[3], 5, 2, 3, 3, _BN_MOMENTUM),
            _stack(depths[3], depths[4], 5, 2, 6, 3, _BN_MOMENTUM),
            _stack(depths[4], depths[5], 3, 1, 6, 2, _BN_MOMENTUM),
            _stack(depths[5], depths[6], 5, 2, 6, 4, _BN_MOMENTUM),
            _stack(depths[6], depths[7], 3, 1, 6, 1, _BN_MOMENTUM),
            nn.Conv2d(depths[7], 1280, 1, padding=0, stride=1, bias=False), bn(1280), nn.ReLU()]


class MNASNet(nn.Module):
    """MNASNet with depth multiplier ``alpha`` for ``num_classes``; ``dropout`` before the
    classifier. Weights start as in torchvision (He normal fan_out convolutions, He uniform
    fan_out (sigmoid gain) classifier, zero biases).

        >>> MNASNet(0.5, num_classes=5).layers[0].weight.shape
        (16, 3, 3, 3)
    """
    _version = 2

    def __init__(self, alpha, num_classes=1000, dropout=0.2):
        if not alpha > 0.0:
            raise ValueError(f"MNASNet: alpha must be > 0, got {alpha}")
        self.alpha, self.num_classes = alpha, num_classes
        self.layers = nn.Sequential(*_layers(_get_depths(alpha)))
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(1280, num_classes))
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.Linear):
                init.kaiming_uniform_(module.weight, mode="fan_out", nonlinearity="sigmoid")
                init.zero_(module.bias)

    def execute(self, x):
        check_images("MNASNet", x)
        return self.classifier(self.layers(x).mean(dims=(2, 3)))


def _mnasnet(name, alpha, pretrained, kwargs):
    check_pretrained(name, pretrained)
    return MNASNet(alpha, **kwargs)


def mnasnet0_5(pretrained=False, **kwargs):
    """MNASNet with depth multiplier 0.5 (2.2M parameters): ``mnasnet0_5(num_classes=10)``."""
    return _mnasnet("mnasnet0_5", 0.5, pretrained, kwargs)


def mnasnet0_75(pretrained=False, **kwargs):
    """MNASNet with depth multiplier 0.75 (3.2M parameters): ``mnasnet0_75(num_classes=10)``."""
    return _mnasnet("mnasnet0_75", 0.75, pretrained, kwargs)


def mnasnet1_0(pretrained=False, **kwargs):
    """MNASNet with depth multiplier 1.0 (4.4M parameters): ``mnasnet1_0(num_classes=10)``."""
    return _mnasnet("mnasnet1_0", 1.0, pretrained, kwargs)


def mnasnet1_3(pretrained=False, **kwargs):
    """MNASNet with depth multiplier 1.3 (6.3M parameters): ``mnasnet1_3(num_classes=10)``."""
    return _mnasnet("mnasnet1_3", 1.3, pretrained, kwargs)
