"""SqueezeNet 1.0 and 1.1 (Iandola et al. 2016) with Jittor's builders (``squeezenet1_0``,
``squeezenet1_1``) and torchvision's layout and parameter names (``features.3.squeeze.weight``,
``classifier.1.bias``), so torchvision's state dicts load by name.

A Fire module squeezes to few channels with a 1x1 convolution and expands with parallel 1x1 and
3x3 convolutions, concatenated; the classifier is dropout, a 1x1 convolution to the classes, ReLU
and global average pooling. Max pools use ``ceil_mode``.

    >>> import jtmini as jt
    >>> from jtmini.models import squeezenet1_1
    >>> squeezenet1_1(num_classes=10)(jt.randn(1, 3, 32, 32)).shape
    (1, 10)
"""
from .. import init, nn
from ..ops.reindex import concat
from ._pretrained import check_images, check_pretrained

__all__ = ["SqueezeNet", "Fire", "squeezenet1_0", "squeezenet1_1"]


class Fire(nn.Module):
    """Squeeze to ``squeeze_planes`` (1x1), expand to ``expand1x1_planes + expand3x3_planes``.

        >>> Fire(8, 4, 6, 6)(jt.randn(1, 8, 5, 5)).shape
        (1, 12, 5, 5)
    """

    def __init__(self, inplanes, squeeze_planes, expand1x1_planes, expand3x3_planes):
        self.inplanes = inplanes
        self.squeeze = nn.Conv2d(inplanes, squeeze_planes, kernel_size=1)
        self.squeeze_activation = nn.ReLU()
        self.expand1x1 = nn.Conv2d(squeeze_planes, expand1x1_planes, kernel_size=1)
        self.expand1x1_activation = nn.ReLU()
        self.expand3x3 = nn.Conv2d(squeeze_planes, expand3x3_planes, kernel_size=3, padding=1)
        self.expand3x3_activation = nn.ReLU()

    def execute(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return concat([self.expand1x1_activation(self.expand1x1(x)),
                       self.expand3x3_activation(self.expand3x3(x))], dim=1)


def _pool():
    return nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True)


def _features(version):
    """torchvision's ``features`` Sequential of SqueezeNet ``version`` ("1_0" or "1_1")."""
    if version == "1_0":
        return nn.Sequential(
            nn.Conv2d(3, 96, kernel_size=7, stride=2), nn.ReLU(), _pool(),
            Fire(96, 16, 64, 64), Fire(128, 16, 64, 64), Fire(128, 32, 128, 128), _pool(),
            Fire(256, 32, 128, 128), Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256), _pool(), Fire(512, 64, 256, 256))
    if version == "1_1":
        return nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=3, stride=2), nn.ReLU(), _pool(),
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), _pool(),
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), _pool(),
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256),
            Fire(512, 64, 256, 256))
    raise ValueError(f"SqueezeNet: unsupported version {version!r}: '1_0' or '1_1' expected")


class SqueezeNet(nn.Module):
    """SqueezeNet ``version`` ("1_0" or "1_1") for ``num_classes``. Weights start as in
    torchvision: the final convolution N(0, 0.01), the others He uniform, biases zero.

        >>> SqueezeNet("1_1", num_classes=5).classifier[1].weight.shape
        (5, 512, 1, 1)
    """

    def __init__(self, version="1_0", num_classes=1000, dropout=0.5):
        self.num_classes = num_classes
        self.features = _features(version)
        final_conv = nn.Conv2d(512, num_classes, kernel_size=1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), final_conv, nn.ReLU(),
                                        nn.AdaptiveAvgPool2d((1, 1)))
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                if module is final_conv:
                    init.gauss_(module.weight, 0.0, 0.01)
                else:
                    init.kaiming_uniform_(module.weight)
                init.zero_(module.bias)

    def execute(self, x):
        check_images("SqueezeNet", x, least=17)
        x = self.classifier(self.features(x))
        return x.reshape(x.shape[0], -1)


def squeezenet1_0(pretrained=False, **kwargs):
    """SqueezeNet 1.0 (1.25M parameters at 1000 classes); ``kwargs`` go to ``SqueezeNet``.

        >>> squeezenet1_0(num_classes=10)(jt.randn(1, 3, 32, 32)).shape
        (1, 10)
    """
    check_pretrained("squeezenet1_0", pretrained)
    return SqueezeNet("1_0", **kwargs)


def squeezenet1_1(pretrained=False, **kwargs):
    """SqueezeNet 1.1 (2.4x less computation than 1.0, as accurate): ``squeezenet1_1()``."""
    check_pretrained("squeezenet1_1", pretrained)
    return SqueezeNet("1_1", **kwargs)
