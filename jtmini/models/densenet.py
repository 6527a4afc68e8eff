"""DenseNet (Huang et al. 2017) with Jittor's builders (``densenet121``, ``densenet161``,
``densenet169``, ``densenet201``) and torchvision's layout and parameter names
(``features.denseblock1.denselayer1.conv1.weight``, ``classifier.bias``), so torchvision's state
dicts load by name.

Each dense layer sees the concatenation of the block's input and every earlier layer's output
and adds ``growth_rate`` channels (BN-ReLU-1x1 conv to ``bn_size * growth_rate``, then
BN-ReLU-3x3 conv); a transition between blocks halves the channels and the map.

    >>> import jtmini as jt
    >>> from jtmini.models import densenet
    >>> densenet.densenet121(num_classes=10)(jt.randn(1, 3, 64, 64)).shape
    (1, 10)
"""
from .. import init, nn
from ..ops.reindex import concat
from ._pretrained import check_images, check_pretrained


def _bn_relu_conv(prefix, c_in, c_out, kernel, padding):
    """(name, layer) pairs of BatchNorm, ReLU and a bias-free convolution, torchvision's names."""
    return [(f"norm{prefix}", nn.BatchNorm2d(c_in)), (f"relu{prefix}", nn.ReLU()),
            (f"conv{prefix}", nn.Conv2d(c_in, c_out, kernel, stride=1, padding=padding, bias=False))]


class _DenseLayer(nn.Sequential):
    def __init__(self, c_in, growth_rate, bn_size, drop_rate):
        super().__init__(dict(_bn_relu_conv(1, c_in, bn_size * growth_rate, 1, 0)
                              + _bn_relu_conv(2, bn_size * growth_rate, growth_rate, 3, 1)))
        self.drop_rate = float(drop_rate)

    def execute(self, x):
        new = super().execute(x)
        return nn.dropout(new, self.drop_rate, self.is_train) if self.drop_rate > 0 else new


class _DenseBlock(nn.Module):
    def __init__(self, num_layers, c_in, bn_size, growth_rate, drop_rate):
        for i in range(num_layers):
            layer = _DenseLayer(c_in + i * growth_rate, growth_rate, bn_size, drop_rate)
            setattr(self, f"denselayer{i + 1}", layer)
        self.num_layers = num_layers

    def execute(self, x):
        features = [x]
        for i in range(self.num_layers):
            layer = getattr(self, f"denselayer{i + 1}")
            features.append(layer(concat(features, dim=1)))
        return concat(features, dim=1)


class _Transition(nn.Sequential):
    def __init__(self, c_in, c_out):
        super().__init__(dict(_bn_relu_conv("", c_in, c_out, 1, 0) + [("pool", nn.AvgPool2d(2, stride=2))]))


class DenseNet(nn.Module):
    """DenseNet-BC: a 7x7 stem and max pool, ``block_config`` dense blocks (layers per block) of
    ``growth_rate`` with transitions between them, BatchNorm, ReLU, global average pooling and
    a linear classifier. Weights start as in torchvision (He normal convolutions, zero biases).

        >>> net = DenseNet(growth_rate=12, block_config=(2, 2), num_init_features=16, num_classes=5)
        >>> net(jt.randn(2, 3, 32, 32)).shape
        (2, 5)
    """

    def __init__(self, growth_rate=32, block_config=(6, 12, 24, 16), num_init_features=64, bn_size=4,
                 drop_rate=0, num_classes=1000):
        stem = [("conv0", nn.Conv2d(3, num_init_features, 7, stride=2, padding=3, bias=False)),
                ("norm0", nn.BatchNorm2d(num_init_features)), ("relu0", nn.ReLU()),
                ("pool0", nn.MaxPool2d(3, stride=2, padding=1))]
        layers, channels = dict(stem), num_init_features
        for i, num_layers in enumerate(block_config):
            layers[f"denseblock{i + 1}"] = _DenseBlock(num_layers, channels, bn_size, growth_rate, drop_rate)
            channels += num_layers * growth_rate
            if i != len(block_config) - 1:
                layers[f"transition{i + 1}"] = _Transition(channels, channels // 2)
                channels //= 2
        layers["norm5"] = nn.BatchNorm2d(channels)
        self.features = nn.Sequential(layers)
        self.classifier = nn.Linear(channels, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                init.kaiming_normal_(module.weight)
            elif isinstance(module, nn.Linear):
                init.zero_(module.bias)

    def execute(self, x):
        check_images("DenseNet", x, least=32)
        x = nn.relu(self.features(x))
        return self.classifier(x.mean(dims=(2, 3)))


def _densenet(name, growth_rate, block_config, num_init_features, pretrained, kwargs):
    check_pretrained(name, pretrained)
    return DenseNet(growth_rate, block_config, num_init_features, **kwargs)


def densenet121(pretrained=False, **kwargs):
    """DenseNet-121 (growth 32, blocks 6-12-24-16): ``densenet121(num_classes=10)``."""
    return _densenet("densenet121", 32, (6, 12, 24, 16), 64, pretrained, kwargs)


def densenet161(pretrained=False, **kwargs):
    """DenseNet-161 (growth 48, blocks 6-12-36-24, 96 stem channels): ``densenet161()``."""
    return _densenet("densenet161", 48, (6, 12, 36, 24), 96, pretrained, kwargs)


def densenet169(pretrained=False, **kwargs):
    """DenseNet-169 (growth 32, blocks 6-12-32-32): ``densenet169(num_classes=10)``."""
    return _densenet("densenet169", 32, (6, 12, 32, 32), 64, pretrained, kwargs)


def densenet201(pretrained=False, **kwargs):
    """DenseNet-201 (growth 32, blocks 6-12-48-32): ``densenet201(num_classes=10)``."""
    return _densenet("densenet201", 32, (6, 12, 48, 32), 64, pretrained, kwargs)
