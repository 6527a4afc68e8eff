"""Model zoo with Jittor's names: AlexNet (``alexnet``), DenseNet (``densenet121/161/169/201``), GoogLeNet
(``googlenet``), Inception v3 (``inception_v3``), MNASNet (``mnasnet0_5/0_75/1_0/1_3``), MobileNetV2
(``mobilenet_v2``), Res2Net (``res2net50``, ``res2net50_26w_4s/26w_6s/26w_8s/48w_2s/14w_8s``,
``res2net101_26w_4s`` = ``res2net101``), ResNet
(``Resnet18/26/34/38/50/101/152``, ``Resnext50_32x4d``, ``Resnext101_32x8d``, ``Wide_resnet50_2``,
``Wide_resnet101_2``, each also spelt in lower case), ShuffleNet V2 (``shufflenet_v2_x0_5/x1_0/x1_5/x2_0``), SqueezeNet (``squeezenet1_0/1_1``) and VGG
(``vgg11``, ``vgg13``, ``vgg16``, ``vgg19`` and their ``_bn`` forms). Layouts and parameter
names are torchvision's, so its state dicts load by name; ``pretrained=True`` is refused (jtmini
downloads nothing).

    >>> from jtmini.models import Resnet18, vgg11_bn
    >>> model = Resnet18(in_channels=1, num_classes=10)
    >>> net = vgg11_bn(num_classes=10)            # 3x32x32 input or larger
"""
# the alexnet and googlenet modules are shadowed by their builders, as in Jittor
from . import densenet, inception, mnasnet, mobilenet, res2net, resnet, shufflenetv2, squeezenet, vgg
from .alexnet import AlexNet, alexnet
from .densenet import DenseNet, densenet121, densenet161, densenet169, densenet201
from .googlenet import GoogLeNet, googlenet
from .inception import Inception3, inception_v3
from .mnasnet import MNASNet, mnasnet0_5, mnasnet0_75, mnasnet1_0, mnasnet1_3
from .mobilenet import MobileNetV2, mobilenet_v2
from .res2net import (Res2Net, res2net50, res2net50_14w_8s, res2net50_26w_4s, res2net50_26w_6s,
                      res2net50_26w_8s, res2net50_48w_2s, res2net101, res2net101_26w_4s)
from .resnet import (Resnet18, Resnet26, Resnet34, Resnet38, Resnet50, Resnet101, Resnet152, ResNet,
                     Resnext50_32x4d, Resnext101_32x8d, Wide_resnet50_2, Wide_resnet101_2, resnet18,
                     resnet26, resnet34, resnet38, resnet50, resnet101, resnet152, resnext50_32x4d,
                     resnext101_32x8d, wide_resnet50_2, wide_resnet101_2)
from .shufflenetv2 import (ShuffleNetV2, shufflenet_v2_x0_5, shufflenet_v2_x1_0, shufflenet_v2_x1_5,
                           shufflenet_v2_x2_0)
from .squeezenet import SqueezeNet, squeezenet1_0, squeezenet1_1
from .vgg import VGG, vgg11, vgg11_bn, vgg13, vgg13_bn, vgg16, vgg16_bn, vgg19, vgg19_bn

__all__ = ["densenet", "DenseNet", "densenet121", "densenet161", "densenet169", "densenet201",
           "inception", "Inception3", "inception_v3", "resnet", "vgg", "ResNet", "Resnet18", "Resnet26", "Resnet34", "Resnet38",
           "Resnet50", "Resnet101", "Resnet152", "Resnext50_32x4d", "Resnext101_32x8d", "Wide_resnet50_2",
           "Wide_resnet101_2", "resnet18", "resnet26", "resnet34", "resnet38", "resnet50", "resnet101",
           "resnet152", "resnext50_32x4d", "resnext101_32x8d", "wide_resnet50_2", "wide_resnet101_2", "VGG", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19",
           "vgg19_bn",
           "AlexNet", "alexnet", "GoogLeNet", "googlenet", "mnasnet", "MNASNet", "mnasnet0_5",
           "mnasnet0_75", "mnasnet1_0", "mnasnet1_3", "mobilenet", "MobileNetV2", "mobilenet_v2",
           "res2net", "Res2Net", "res2net50", "res2net50_26w_4s", "res2net50_26w_6s", "res2net50_26w_8s",
           "res2net50_48w_2s", "res2net50_14w_8s", "res2net101_26w_4s", "res2net101", "shufflenetv2",
           "ShuffleNetV2", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5",
           "shufflenet_v2_x2_0", "squeezenet", "SqueezeNet", "squeezenet1_0", "squeezenet1_1"]
