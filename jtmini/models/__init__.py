"""Model zoo with Jittor's names: DenseNet (``densenet121/161/169/201``), Inception v3
(``inception_v3``), ResNet
(``Resnet18/26/34/38/50/101/152``, ``Resnext50_32x4d``, ``Resnext101_32x8d``, ``Wide_resnet50_2``,
``Wide_resnet101_2``, each also spelt in lower case) and VGG (``vgg11``, ``vgg13``, ``vgg16``, ``vgg19`` and their ``_bn`` forms). Layouts and parameter
names are torchvision's, so its state dicts load by name; ``pretrained=True`` is refused (jtmini
downloads nothing).

    >>> from jtmini.models import Resnet18, vgg11_bn
    >>> model = Resnet18(in_channels=1, num_classes=10)
    >>> net = vgg11_bn(num_classes=10)            # 3x32x32 input or larger
"""
from . import densenet, inception, resnet, vgg
from .densenet import DenseNet, densenet121, densenet161, densenet169, densenet201
from .inception import Inception3, inception_v3
from .resnet import (Resnet18, Resnet26, Resnet34, Resnet38, Resnet50, Resnet101, Resnet152, ResNet,
                     Resnext50_32x4d, Resnext101_32x8d, Wide_resnet50_2, Wide_resnet101_2, resnet18,
                     resnet26, resnet34, resnet38, resnet50, resnet101, resnet152, resnext50_32x4d,
                     resnext101_32x8d, wide_resnet50_2, wide_resnet101_2)
from .vgg import VGG, vgg11, vgg11_bn, vgg13, vgg13_bn, vgg16, vgg16_bn, vgg19, vgg19_bn

__all__ = ["densenet", "DenseNet", "densenet121", "densenet161", "densenet169", "densenet201",
           "inception", "Inception3", "inception_v3", "resnet", "vgg", "ResNet", "Resnet18", "Resnet26", "Resnet34", "Resnet38",
           "Resnet50", "Resnet101", "Resnet152", "Resnext50_32x4d", "Resnext101_32x8d", "Wide_resnet50_2",
           "Wide_resnet101_2", "resnet18", "resnet26", "resnet34", "resnet38", "resnet50", "resnet101",
           "resnet152", "resnext50_32x4d", "resnext101_32x8d", "wide_resnet50_2", "wide_resnet101_2", "VGG", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19",
           "vgg19_bn"]
