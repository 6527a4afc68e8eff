"""ResNet (He et al. 2015) with Jittor's (and torchvision's) layout and parameter names.

The ImageNet stem (7x7 stride-2 conv, 3x3 stride-2 max pool) is kept for any input size;
``in_channels`` and ``num_classes`` adapt it to other data, e.g. 1x28x28 MNIST digits.

    >>> import jtmini as jt
    >>> from jtmini.models import resnet
    >>> model = resnet.Resnet18(in_channels=1, num_classes=10)
    >>> model(jt.randn(2, 1, 28, 28)).shape
    (2, 10)
"""
from .. import nn


def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
    return nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=dilation, groups=groups,
                     bias=False, dilation=dilation)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection (ResNet-18/34)."""

    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        self.conv1, self.bn1 = conv3x3(inplanes, planes, stride), nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2, self.bn2 = conv3x3(planes, planes), nn.BatchNorm2d(planes)
        self.downsample, self.stride = downsample, stride

    def execute(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3, 1x1 expand (x4) with a residual connection (ResNet-50 and deeper)."""

    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        width = planes
        self.conv1, self.bn1 = conv1x1(inplanes, width), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = conv3x3(width, width, stride), nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
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
    resolution), global average pooling and a linear classifier."""

    def __init__(self, block, layers, num_classes=1000, in_channels=3):
        self.inplanes = 64
        self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def execute(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.avgpool(x)
        return self.fc(x.reshape(x.shape[0], -1))


def Resnet18(num_classes=1000, in_channels=3):
    """ResNet-18: BasicBlock stages of 2, 2, 2, 2 blocks (11.7M parameters at 1000 classes)."""
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes, in_channels)


def Resnet34(num_classes=1000, in_channels=3):
    """ResNet-34: BasicBlock stages of 3, 4, 6, 3 blocks."""
    return ResNet(BasicBlock, [3, 4, 6, 3], num_classes, in_channels)


def Resnet50(num_classes=1000, in_channels=3):
    """ResNet-50: Bottleneck stages of 3, 4, 6, 3 blocks."""
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes, in_channels)
