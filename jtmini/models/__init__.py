"""Model zoo: ``jtmini.models.resnet`` (Resnet18/34/50).

    >>> from jtmini.models import Resnet18
    >>> model = Resnet18(in_channels=1, num_classes=10)
"""
from . import resnet
from .resnet import Resnet18, Resnet34, Resnet50, ResNet

__all__ = ["resnet", "ResNet", "Resnet18", "Resnet34", "Resnet50"]
