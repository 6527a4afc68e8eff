"""Model zoo with Jittor's names: DenseNet (``densenet121/161/169/201``), Inception v3
(``inception_v3``), ResNet
(``Resnet18/34/50``, also spelt ``resnet18/34/50``) and VGG (``vgg11``, ``vgg13``, ``vgg16``, ``vgg19`` and their ``_bn`` forms). Layouts and parameter
names are torchvision's, so its state dicts load by name; ``pretrained=True`` is refused (jtmini
downloads nothing).

    >>> from jtmini.models import Resnet18, vgg11_bn
    >>> model = Resnet18(in_channels=1, num_classes=10)
    >>> net = vgg11_bn(num_classes=10)            # 3x32x32 input or larger
"""
from . import densenet, inception, resnet, vgg
from .densenet import DenseNet, densenet121, densenet161, densenet169, densenet201
from .inception import Inception3, inception_v3
from .resnet import Resnet18, Resnet34, Resnet50, ResNet, resnet18, resnet34, resnet50
from .vgg import VGG, vgg11, vgg11_bn, vgg13, vgg13_bn, vgg16, vgg16_bn, vgg19, vgg19_bn

__all__ = ["densenet", "DenseNet", "densenet121", "densenet161", "densenet169", "densenet201",
           "inception", "Inception3", "inception_v3", "resnet", "vgg", "ResNet", "Resnet18", "Resnet34", "Resnet50", "resnet18", "resnet34",
           "resnet50", "VGG", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19",
           "vgg19_bn"]
