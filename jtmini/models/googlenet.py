"""GoogLeNet (Inception v1, Szegedy et al. 2015, with BatchNorm as torchvision's) with Jittor's
builder ``googlenet`` and torchvision's layout and parameter names (``conv1.conv.weight``,
``inception3a.branch2.1.bn.weight``, ``aux1.fc2.bias``), so torchvision's state dicts load by name.

A stem of three convolutions and two max pools, nine inception blocks (1x1, 1x1-3x3, 1x1-3x3 and
pool-1x1 branches concatenated; the third branch's 3x3 stands for the paper's 5x5, as in
torchvision) with max pools between stages, global average pooling, dropout and the classifier.
Max pools use ``ceil_mode``. As in Jittor, ``execute`` returns the logits only; with
``aux_logits=True`` (the default) the two auxiliary classifiers are built, so their weights load,
and ``forward_aux`` gives all three outputs for training with them.

    >>> import jtmini as jt
    >>> from jtmini.models import googlenet
    >>> googlenet(num_classes=10)(jt.randn(1, 3, 32, 32)).shape
    (1, 10)
"""
from typing import NamedTuple, Optional

from .. import init, nn
from ..ops.reindex import concat
from ..var import Var
from ._pretrained import check_images, check_pretrained
from .inception import BasicConv2d  # the same block as Inception v3's (torchvision has two copies)

__all__ = ["GoogLeNet", "GoogLeNetOutputs", "googlenet", "Inception", "InceptionAux", "BasicConv2d"]


class GoogLeNetOutputs(NamedTuple):
    """The training outputs of ``GoogLeNet.forward_aux``, torchvision's order."""
    logits: Var
    aux_logits2: Optional[Var]
    aux_logits1: Optional[Var]


class Inception(nn.Module):
    """Four branches concatenated: ``ch1x1 + ch3x3 + ch5x5 + pool_proj`` output channels.

        >>> Inception(8, 2, 2, 4, 2, 4, 2)(jt.randn(1, 8, 5, 5)).shape
        (1, 12, 5, 5)
    """

    def __init__(self, in_channels, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj, conv_block=None):
        conv = BasicConv2d if conv_block is None else conv_block
        self.branch1 = conv(in_channels, ch1x1, kernel_size=1)
        self.branch2 = nn.Sequential(conv(in_channels, ch3x3red, kernel_size=1),
                                     conv(ch3x3red, ch3x3, kernel_size=3, padding=1))
        self.branch3 = nn.Sequential(conv(in_channels, ch5x5red, kernel_size=1),
                                     conv(ch5x5red, ch5x5, kernel_size=3, padding=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=True),
                                     conv(in_channels, pool_proj, kernel_size=1))

    def execute(self, x):
        return concat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], dim=1)


class InceptionAux(nn.Module):
    """Auxiliary classifier: 4x4 adaptive average pool, 1x1 conv to 128, two linear layers."""

    def __init__(self, in_channels, num_classes, conv_block=None, dropout=0.7):
        conv = BasicConv2d if conv_block is None else conv_block
        self.conv = conv(in_channels, 128, kernel_size=1)
        self.fc1 = nn.Linear(2048, 1024)
        self.fc2 = nn.Linear(1024, num_classes)
        self.dropout = nn.Dropout(p=dropout)

    def execute(self, x):
        x = self.conv(nn.AdaptiveAvgPool2d((4, 4))(x))
        x = nn.relu(self.fc1(x.reshape(x.shape[0], -1)))
        return self.fc2(self.dropout(x))


# (name, in, 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool projection) of the nine blocks
_BLOCKS = [("inception3a", 192, 64, 96, 128, 16, 32, 32), ("inception3b", 256, 128, 128, 192, 32, 96, 64),
           ("inception4a", 480, 192, 96, 208, 16, 48, 64), ("inception4b", 512, 160, 112, 224, 24, 64, 64),
           ("inception4c", 512, 128, 128, 256, 24, 64, 64), ("inception4d", 512, 112, 144, 288, 32, 64, 64),
           ("inception4e", 528, 256, 160, 320, 32, 128, 128), ("inception5a", 832, 256, 160, 320, 32, 128, 128),
           ("inception5b", 832, 384, 192, 384, 48, 128, 128)]


class GoogLeNet(nn.Module):
    """GoogLeNet for ``num_classes``. ``aux_logits`` builds the two auxiliary classifiers (see
    ``forward_aux``); ``init_weights`` applies torchvision's scheme (truncated N(0, 0.01) in
    [-2, 2] for convolutions and linear layers); ``blocks`` replaces the three block classes
    [conv, inception, aux], as in Jittor; ``transform_input`` maps ImageNet-normalised input to
    the (x - 0.5) / 0.5 scaling of Google's weights, as torchvision's.

        >>> GoogLeNet(num_classes=5, aux_logits=False).fc.weight.shape
        (5, 1024)
    """

    def __init__(self, num_classes=1000, aux_logits=True, init_weights=True, blocks=None,
                 transform_input=False, dropout=0.2, dropout_aux=0.7):
        conv, inception, aux = (BasicConv2d, Inception, InceptionAux) if blocks is None else blocks
        self.aux_logits, self.transform_input = bool(aux_logits), bool(transform_input)
        self.conv1 = conv(3, 64, kernel_size=7, stride=2, padding=3)
        self.maxpool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.conv2 = conv(64, 64, kernel_size=1)
        self.conv3 = conv(64, 192, kernel_size=3, padding=1)
        self.maxpool2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        for name, *channels in _BLOCKS:
            setattr(self, name, inception(*channels))
        self.maxpool3 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.maxpool4 = nn.MaxPool2d(2, stride=2, ceil_mode=True)
        self.aux1 = aux(512, num_classes, dropout=dropout_aux) if self.aux_logits else None
        self.aux2 = aux(528, num_classes, dropout=dropout_aux) if self.aux_logits else None
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(1024, num_classes)
        if init_weights:
            for module in self.modules():
                if isinstance(module, (nn.Conv2d, nn.Linear)):
                    init.trunc_normal_(module.weight, mean=0.0, std=0.01, a=-2, b=2)

    def _transform_input(self, x):
        check_images("GoogLeNet", x)
        if not self.transform_input:
            return x
        mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
        return concat([x[:, c:c + 1] * (std[c] / 0.5) + (mean[c] - 0.5) / 0.5 for c in range(3)], dim=1)

    def _blocks(self, x, names):
        for name in names:
            x = getattr(self, name)(x)
        return x

    def _forward(self, x, with_aux):
        x = self._transform_input(x)
        x = self.maxpool2(self.conv3(self.conv2(self.maxpool1(self.conv1(x)))))
        x = self.inception4a(self.maxpool3(self._blocks(x, ("inception3a", "inception3b"))))
        aux1 = self.aux1(x) if with_aux and self.aux_logits else None
        x = self._blocks(x, ("inception4b", "inception4c", "inception4d"))
        aux2 = self.aux2(x) if with_aux and self.aux_logits else None
        x = self.maxpool4(self.inception4e(x))
        x = self.avgpool(self._blocks(x, ("inception5a", "inception5b")))
        logits = self.fc(self.dropout(x.reshape(x.shape[0], -1)))
        return GoogLeNetOutputs(logits, aux2, aux1)

    def forward_aux(self, x):
        """``GoogLeNetOutputs(logits, aux_logits2, aux_logits1)``, torchvision's training outputs
        (the auxiliary ones None without ``aux_logits``).

            >>> [v.shape for v in googlenet(num_classes=3).forward_aux(jt.randn(1, 3, 32, 32))]
            [(1, 3), (1, 3), (1, 3)]
        """
        return self._forward(x, with_aux=True)

    def execute(self, x):
        return self._forward(x, with_aux=False).logits


def googlenet(pretrained=False, **kwargs):
    """GoogLeNet (13.0M parameters with the auxiliary classifiers, 6.6M without, at 1000 classes);
    ``kwargs`` go to ``GoogLeNet``.

        >>> googlenet(num_classes=10, aux_logits=False).aux1 is None
        True
    """
    check_pretrained("googlenet", pretrained)
    return GoogLeNet(**kwargs)
