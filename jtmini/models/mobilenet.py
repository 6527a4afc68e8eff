"""MobileNetV2 (Sandler et al. 2018) with Jittor's builder ``mobilenet_v2`` and torchvision's layout
and parameter names (``features.0.0.weight``, ``features.1.conv.0.0.weight``,
``classifier.1.bias``), so torchvision's state dicts load by name.

An inverted residual expands with a 1x1 convolution (ReLU6), filters with a depthwise 3x3
(ReLU6) and projects back with a linear 1x1; it adds its input where shape allows.

    >>> import jtmini as jt
    >>> from jtmini.models import mobilenet_v2
    >>> mobilenet_v2(num_classes=10)(jt.randn(1, 3, 32, 32)).shape
    (1, 10)
"""
from .. import init, nn
from ._pretrained import check_images, check_pretrained

__all__ = ["MobileNetV2", "InvertedResidual", "ConvBNReLU", "mobilenet_v2"]

# (expansion t, output channels c, repeats n, first stride s) of each stage, the paper's Table 2
_SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
            [6, 160, 3, 2], [6, 320, 1, 1]]


def _make_divisible(v, divisor, min_value=None):
    """``v`` rounded to a multiple of ``divisor`` (at least ``min_value``), never 10% below ``v``."""
    min_value = divisor if min_value is None else min_value
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvBNReLU(nn.Sequential):
    """Bias-free convolution (padding keeps the size), BatchNorm, ReLU6: ``features.0``'s form.

        >>> ConvBNReLU(3, 8, stride=2)(jt.randn(1, 3, 8, 8)).shape
        (1, 8, 4, 4)
    """

    def __init__(self, in_planes, out_planes, kernel_size=3, stride=1, groups=1):
        padding = (kernel_size - 1) // 2
        super().__init__(nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups,
                                   bias=False), nn.BatchNorm2d(out_planes), nn.ReLU6())


class InvertedResidual(nn.Module):
    """Expand by ``expand_ratio`` (1x1), depthwise 3x3 of ``stride``, project to ``oup`` (1x1).

        >>> InvertedResidual(8, 8, 1, expand_ratio=6)(jt.randn(1, 8, 5, 5)).shape
        (1, 8, 5, 5)
    """

    def __init__(self, inp, oup, stride, expand_ratio):
        if stride not in (1, 2):
            raise ValueError(f"InvertedResidual: stride must be 1 or 2, got {stride}")
        self.stride = stride
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [ConvBNReLU(inp, hidden_dim, kernel_size=1)] if expand_ratio != 1 else []
        layers += [ConvBNReLU(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),
                   nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def execute(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


def _check_setting(setting):
    if len(setting) == 0 or any(len(row) != 4 for row in setting):
        raise ValueError(f"MobileNetV2: inverted_residual_setting must be a non-empty list of "
                         f"[t, c, n, s] rows, got {setting}")


class MobileNetV2(nn.Module):
    """MobileNetV2 for ``num_classes``; ``width_mult`` scales every width (rounded to multiples of
    ``round_nearest``); ``inverted_residual_setting`` replaces the [t, c, n, s] stage table;
    ``block`` the residual block class. Weights start as in torchvision (He normal fan_out
    convolutions, N(0, 0.01) classifier, zero biases).

        >>> MobileNetV2(num_classes=5, width_mult=0.5).classifier[1].weight.shape
        (5, 1280)
    """

    def __init__(self, num_classes=1000, width_mult=1.0, inverted_residual_setting=None,
                 round_nearest=8, block=None, dropout=0.2):
        block = InvertedResidual if block is None else block
        setting = _SETTING if inverted_residual_setting is None else inverted_residual_setting
        _check_setting(setting)
        input_channel = _make_divisible(32 * width_mult, round_nearest)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult), round_nearest)
        features = [ConvBNReLU(3, input_channel, stride=2)]
        for t, c, n, s in setting:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(block(input_channel, output_channel, s if i == 0 else 1, expand_ratio=t))
                input_channel = output_channel
        features.append(ConvBNReLU(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(self.last_channel, num_classes))
        self._initialize_weights()

    def _initialize_weights(self):
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                init.kaiming_normal_(module.weight, mode="fan_out")
            elif isinstance(module, nn.Linear):
                init.gauss_(module.weight, 0.0, 0.01)
            if isinstance(module, (nn.Conv2d, nn.Linear)) and module.bias is not None:
                init.zero_(module.bias)

    def execute(self, x):
        check_images("MobileNetV2", x)
        x = self.features(x).mean(dims=(2, 3))
        return self.classifier(x)


def mobilenet_v2(pretrained=False, **kwargs):
    """MobileNetV2 (3.5M parameters at 1000 classes); ``kwargs`` (not in Jittor's builder) go to
    ``MobileNetV2``.

        >>> mobilenet_v2(num_classes=10, width_mult=0.5).features[0][0].weight.shape
        (16, 3, 3, 3)
    """
    check_pretrained("mobilenet_v2", pretrained)
    return MobileNetV2(**kwargs)
