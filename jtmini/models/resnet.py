"""ResNet (He et al. 2015) with Jittor's (and torchvision's) layout and parameter names.

The ImageNet stem (7x7 stride-2 conv, 3x3 stride-2 max pool) is kept for any input size;
``in_channels`` and ``num_classes`` adapt it to other data, e.g. 1x28x28 MNIST digits.

    >>> import jtmini as jt
    >>> from jtmini.models import resnet
    >>> model = resnet.Resnet18(in_channels=1, num_classes=10)
    >>> model(jt.randn(2, 1, 28, 28)).shape
    (2, 10)
"""
from .. import init, nn
from ._pretrained import check_pretrained


def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
    """A 3x3 convolution without bias, padded to keep the size at stride 1: ``conv3x3(64, 64)``."""
    return nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=dilation, groups=groups,
                     bias=False, dilation=dilation)


def conv1x1(in_planes, out_planes, stride=1):
    """A 1x1 convolution without bias (projections, shortcuts): ``conv1x1(64, 256)``."""
    return nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection (ResNet-18/34).

        >>> BasicBlock(64, 64)(jt.randn(1, 64, 8, 8)).shape
        (1, 64, 8, 8)
    """

    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1,
                 norm_layer=None):
        if groups != 1 or base_width != 64:
            raise ValueError(f"BasicBlock takes groups=1 and width_per_group=64 only (torchvision's "
                             f"rule), got groups={groups}, width_per_group={base_width}; use Bottleneck")
        if dilation > 1:
            raise ValueError(f"BasicBlock takes dilation=1 only (torchvision's and Jittor's rule), got "
                             f"dilation={dilation}: replace_stride_with_dilation needs Bottleneck")
        norm_layer = norm_layer or nn.BatchNorm2d
        self.conv1, self.bn1 = conv3x3(inplanes, planes, stride), norm_layer(planes)
        self.relu = nn.ReLU()
        self.conv2, self.bn2 = conv3x3(planes, planes), norm_layer(planes)
        self.downsample, self.stride = downsample, stride

    def execute(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (``groups`` groups, ResNeXt's cardinality), 1x1 expand (x4) with a residual
    connection (ResNet-50 and deeper); the middle width is ``planes * base_width / 64 * groups``
    (wide ResNets double ``base_width``), as torchvision's.

        >>> Bottleneck(256, 64)(jt.randn(1, 256, 8, 8)).shape
        (1, 256, 8, 8)
    """

    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1,
                 norm_layer=None):
        width = int(planes * (base_width / 64.0)) * groups
        norm_layer = norm_layer or nn.BatchNorm2d
        self.conv1, self.bn1 = conv1x1(inplanes, width), norm_layer(width)
        self.conv2, self.bn2 = conv3x3(width, width, stride, groups, dilation), norm_layer(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU()
        self.downsample, self.stride = downsample, stride

    def execute(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + identity)


class ResNet(nn.Module):
    """Stem, four stages of ``block`` (64, 128, 256, 512 planes; the last three halve the
    resolution), global average pooling and a linear classifier. Layout and parameter names are
    torchvision's (``layer1.0.conv1.weight``, ``layer2.0.downsample.0.weight``, ``fc.weight``), so
    its state dicts load by name. The arguments are Jittor's, in its order: ``groups`` and
    ``width_per_group`` shape the Bottleneck's middle conv (ResNeXt, wide ResNet);
    ``replace_stride_with_dilation`` (three bools, for the last three stages) keeps a stage's
    resolution and dilates its 3x3 convs instead (segmentation backbones); ``norm_layer`` makes the
    normalisation layers (BatchNorm2d); ``zero_init_residual`` starts each block's last norm at
    zero weight, so every block starts as the identity (torchvision's meaning; Jittor ignores it).
    ``in_channels`` (not in Jittor) adapts the stem to other data.

        >>> ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10).fc.weight.shape
        (10, 512)
    """

    def __init__(self, block, layers, num_classes=1000, zero_init_residual=False, groups=1, width_per_group=64,
                 replace_stride_with_dilation=None, norm_layer=None, in_channels=3):
        dilate = [False] * 3 if replace_stride_with_dilation is None else list(replace_stride_with_dilation)
        if len(dilate) != 3:
            raise ValueError(f"ResNet: replace_stride_with_dilation must be None or 3 bools (stages 2-4), "
                             f"got {replace_stride_with_dilation!r}")
        self.inplanes, self.groups, self.base_width = 64, groups, width_per_group
        self.dilation, self._norm_layer = 1, norm_layer or nn.BatchNorm2d
        self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = self._norm_layer(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2, dilate=dilate[0])
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2, dilate=dilate[1])
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2, dilate=dilate[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        if zero_init_residual:
            for m in self.modules():
                last = m.bn3 if isinstance(m, Bottleneck) else m.bn2 if isinstance(m, BasicBlock) else None
                if getattr(last, "weight", None) is not None:     # None: no block, or a norm without weight
                    init.zero_(last.weight)

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        downsample, previous_dilation = None, self.dilation
        if dilate:          # keep the resolution: the stride becomes dilation from here on
            self.dilation, stride = self.dilation * stride, 1
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       self._norm_layer(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample, **self._block_shape(True, previous_dilation))]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes, **self._block_shape(False, self.dilation)) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def _block_shape(self, first, dilation):
        """The keyword arguments of a stage's blocks (``first``: the stage's first block)."""
        return dict(groups=self.groups, base_width=self.base_width, dilation=dilation, norm_layer=self._norm_layer)

    def execute(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.avgpool(x)
        return self.fc(x.reshape(x.shape[0], -1))


def _resnet(name, block, layers, pretrained, kwargs):
    check_pretrained(name, pretrained)
    return ResNet(block, layers, **kwargs)


def Resnet18(pretrained=False, **kwargs):
    """ResNet-18: BasicBlock stages of 2, 2, 2, 2 blocks (11.7M parameters at 1000 classes).
    ``kwargs`` go to ``ResNet`` (``num_classes``, ``in_channels``); ``pretrained=True`` is refused.

        >>> Resnet18(num_classes=10, in_channels=1)(jt.randn(2, 1, 28, 28)).shape
        (2, 10)
    """
    return _resnet("Resnet18", BasicBlock, [2, 2, 2, 2], pretrained, kwargs)


def Resnet34(pretrained=False, **kwargs):
    """ResNet-34: BasicBlock stages of 3, 4, 6, 3 blocks (21.8M parameters at 1000 classes).

        >>> model = Resnet34(num_classes=10)
    """
    return _resnet("Resnet34", BasicBlock, [3, 4, 6, 3], pretrained, kwargs)


def Resnet50(pretrained=False, **kwargs):
    """ResNet-50: Bottleneck stages of 3, 4, 6, 3 blocks (25.6M parameters at 1000 classes).

        >>> model = Resnet50(num_classes=10)
    """
    return _resnet("Resnet50", Bottleneck, [3, 4, 6, 3], pretrained, kwargs)


def Resnet26(pretrained=False, **kwargs):
    """ResNet-26 (Jittor's): Bottleneck stages of 1, 2, 4, 1 blocks."""
    return _resnet("Resnet26", Bottleneck, [1, 2, 4, 1], pretrained, kwargs)


def Resnet38(pretrained=False, **kwargs):
    """ResNet-38 (Jittor's): Bottleneck stages of 2, 3, 5, 2 blocks."""
    return _resnet("Resnet38", Bottleneck, [2, 3, 5, 2], pretrained, kwargs)


def Resnet101(pretrained=False, **kwargs):
    """ResNet-101: Bottleneck stages of 3, 4, 23, 3 blocks (44.5M parameters at 1000 classes)."""
    return _resnet("Resnet101", Bottleneck, [3, 4, 23, 3], pretrained, kwargs)


def Resnet152(pretrained=False, **kwargs):
    """ResNet-152: Bottleneck stages of 3, 8, 36, 3 blocks (60.2M parameters at 1000 classes)."""
    return _resnet("Resnet152", Bottleneck, [3, 8, 36, 3], pretrained, kwargs)


def Resnext50_32x4d(pretrained=False, **kwargs):
    """ResNeXt-50 32x4d: ResNet-50's stages with 32 groups of width 4 in each 3x3 conv."""
    return _resnet("Resnext50_32x4d", Bottleneck, [3, 4, 6, 3], pretrained, dict(kwargs, groups=32, width_per_group=4))


def Resnext101_32x8d(pretrained=False, **kwargs):
    """ResNeXt-101 32x8d: ResNet-101's stages with 32 groups of width 8 in each 3x3 conv."""
    return _resnet("Resnext101_32x8d", Bottleneck, [3, 4, 23, 3], pretrained, dict(kwargs, groups=32, width_per_group=8))


def Wide_resnet50_2(pretrained=False, **kwargs):
    """Wide ResNet-50-2: ResNet-50 with each Bottleneck's middle width doubled."""
    return _resnet("Wide_resnet50_2", Bottleneck, [3, 4, 6, 3], pretrained, dict(kwargs, width_per_group=128))


def Wide_resnet101_2(pretrained=False, **kwargs):
    """Wide ResNet-101-2: ResNet-101 with each Bottleneck's middle width doubled."""
    return _resnet("Wide_resnet101_2", Bottleneck, [3, 4, 23, 3], pretrained, dict(kwargs, width_per_group=128))


# Jittor spells the builders both ways
resnet18, resnet34, resnet50, resnet26, resnet38 = Resnet18, Resnet34, Resnet50, Resnet26, Resnet38
resnet101, resnet152, resnext50_32x4d, resnext101_32x8d = Resnet101, Resnet152, Resnext50_32x4d, Resnext101_32x8d
wide_resnet50_2, wide_resnet101_2 = Wide_resnet50_2, Wide_resnet101_2
