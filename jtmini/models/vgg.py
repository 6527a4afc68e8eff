"""VGG (Simonyan and Zisserman 2014) with Jittor's builders and torchvision's layout and parameter
names (``features.0.weight``, ``classifier.6.bias``), so torchvision's state dicts load by name.

``cfgs`` holds the four configurations ("A": VGG-11, "B": VGG-13, "D": VGG-16, "E": VGG-19): an
int is a 3x3 convolution (padding 1) with that many output channels, followed by ReLU (with
BatchNorm between them in the ``_bn`` forms); "M" is a 2x2 max pool of stride 2. The five pools
need an input of at least 32x32; the classifier sees a 7x7 map whatever the input size (adaptive
average pooling), as in torchvision.

    >>> import jtmini as jt
    >>> from jtmini.models import vgg
    >>> model = vgg.vgg11_bn(num_classes=10)
    >>> model(jt.randn(2, 3, 32, 32)).shape
    (2, 10)
"""
from .. import dtypes, init, nn
from ._pretrained import check_pretrained

# VGG-11, -13, -16 and -19 (the paper's columns A, B, D, E)
cfgs = {
    "A": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "B": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "D": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "E": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512,
          512, "M"],
}


class VGG(nn.Module):
    """``features`` (a Module from ``make_layers``), adaptive average pooling to 7x7 and a
    three-layer classifier (4096, 4096, ``num_classes``, ReLU and Dropout between them).

    ``init_weights`` (default True) applies torchvision's scheme: He normal (fan_out, ReLU) for
    convolutions, N(0, 0.01) for linear weights, zero biases, BatchNorm at weight 1, bias 0.
    False keeps each layer's own default (U(-1/sqrt(fan_in), 1/sqrt(fan_in))).

        >>> net = VGG(make_layers(cfgs["A"]), num_classes=10)
        >>> net.classifier[6].weight.shape
        (10, 4096)
    """

    def __init__(self, features, num_classes=1000, init_weights=True):
        if not isinstance(features, nn.Module):
            raise TypeError(f"VGG: features must be a Module (see make_layers), got {type(features).__name__}")
        self.features = features
        # each 2x2 pool halves the map, so the input must be at least 2**pools on each side
        self._least_size = 2 ** sum(isinstance(m, nn.MaxPool2d) for m in features.modules())
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(),
            nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(),
            nn.Linear(4096, num_classes))
        if init_weights:
            self._initialize_weights()

    def _initialize_weights(self):
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.Linear):
                init.gauss_(module.weight, 0.0, 0.01)
            if isinstance(module, (nn.Conv2d, nn.Linear)) and module.bias is not None:
                init.zero_(module.bias)

    def execute(self, x):
        if x.ndim != 4 or min(x.shape[2:]) < self._least_size:
            raise ValueError(f"VGG needs (N, C, H, W) input with H and W >= {self._least_size} "
                             f"(its features halve the map {self._least_size.bit_length() - 1} times), "
                             f"got shape {x.shape}")
        x = self.avgpool(self.features(x))
        return self.classifier(x.reshape(x.shape[0], -1))


def make_layers(cfg, batch_norm=False, in_channels=3):
    """The ``features`` Sequential of a configuration (a list of channel counts and "M"; see
    ``cfgs``); ``in_channels`` (not in Jittor) adapts the first convolution to other data.

        >>> [type(m).__name__ for m in make_layers([64, "M"], batch_norm=True)]
        ['Conv2d', 'BatchNorm2d', 'ReLU', 'MaxPool2d']
    """
    if isinstance(cfg, str) or not isinstance(cfg, (list, tuple)):
        raise TypeError(f"make_layers: cfg must be a list of channel counts and 'M', got {cfg!r}")
    layers = []
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        elif dtypes.is_int(v) and not isinstance(v, bool) and v >= 1:
            conv = nn.Conv2d(in_channels, v, kernel_size=3, padding=1)
            layers += [conv, nn.BatchNorm2d(v), nn.ReLU()] if batch_norm else [conv, nn.ReLU()]
            in_channels = v
        else:
            raise ValueError(f"make_layers: each cfg item must be a channel count >= 1 or 'M', got {v!r}")
    return nn.Sequential(*layers)


def _vgg(name, cfg, batch_norm, pretrained, kwargs):
    check_pretrained(name, pretrained)
    in_channels = kwargs.pop("in_channels", 3)
    return VGG(make_layers(cfgs[cfg], batch_norm, in_channels), **kwargs)


def vgg11(pretrained=False, **kwargs):
    """VGG-11 (configuration "A", 132.9M parameters at 1000 classes); ``kwargs`` go to ``VGG``
    (``num_classes``, ``init_weights``) or ``make_layers`` (``in_channels``).

        >>> vgg11(num_classes=10)(jt.randn(1, 3, 32, 32)).shape
        (1, 10)
    """
    return _vgg("vgg11", "A", False, pretrained, kwargs)


def vgg11_bn(pretrained=False, **kwargs):
    """VGG-11 with BatchNorm after each convolution: ``vgg11_bn(num_classes=10)``."""
    return _vgg("vgg11_bn", "A", True, pretrained, kwargs)


def vgg13(pretrained=False, **kwargs):
    """VGG-13 (configuration "B"): ``vgg13(num_classes=10)``."""
    return _vgg("vgg13", "B", False, pretrained, kwargs)


def vgg13_bn(pretrained=False, **kwargs):
    """VGG-13 with BatchNorm after each convolution: ``vgg13_bn(num_classes=10)``."""
    return _vgg("vgg13_bn", "B", True, pretrained, kwargs)


def vgg16(pretrained=False, **kwargs):
    """VGG-16 (configuration "D", 138.4M parameters at 1000 classes): ``vgg16(num_classes=10)``."""
    return _vgg("vgg16", "D", False, pretrained, kwargs)


def vgg16_bn(pretrained=False, **kwargs):
    """VGG-16 with BatchNorm after each convolution: ``vgg16_bn(num_classes=10)``."""
    return _vgg("vgg16_bn", "D", True, pretrained, kwargs)


def vgg19(pretrained=False, **kwargs):
    """VGG-19 (configuration "E"): ``vgg19(num_classes=10)``."""
    return _vgg("vgg19", "E", False, pretrained, kwargs)


def vgg19_bn(pretrained=False, **kwargs):
    """VGG-19 with BatchNorm after each convolution: ``vgg19_bn(num_classes=10)``."""
    return _vgg("vgg19_bn", "E", True, pretrained, kwargs)
