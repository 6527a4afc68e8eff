"""Inception v3 (Szegedy et al. 2016) with Jittor's builder ``inception_v3`` and torchvision's
layout and parameter names (``Mixed_5b.branch1x1.conv.weight``, ``AuxLogits.fc.bias``), so
torchvision's state dicts load by name.

A stem of five 3x3/1x1 convolutions and two max pools, then the mixed blocks: A (three, 35x35),
B (grid reduction), C (four, 17x17, factorised 7x7), D (grid reduction) and E (two, 8x8), global
average pooling, dropout and the classifier. Every convolution is ``BasicConv2d``: a bias-free
convolution, BatchNorm (eps 1e-3) and ReLU. As in Jittor, ``execute`` returns the logits only; the
auxiliary classifier (``aux_logits=True``) is built, so its weights load, and ``forward_aux``
gives both outputs for training with it. Inputs are 3 x 299 x 299 (75 x 75 at least).

    >>> import jtmini as jt
    >>> from jtmini.models import inception_v3
    >>> inception_v3(num_classes=10)(jt.randn(1, 3, 75, 75)).shape
    (1, 10)
"""
from .. import nn
from ..ops.reindex import concat
from ._pretrained import check_pretrained

__all__ = ["Inception3", "inception_v3", "BasicConv2d", "InceptionA", "InceptionB", "InceptionC",
           "InceptionD", "InceptionE", "InceptionAux"]


def inception_v3(pretrained=False, progress=True, **kwargs):
    """Inception v3 (``Inception3(**kwargs)``); ``progress`` is accepted and unused, as nothing is
    downloaded.

    >>> inception_v3(num_classes=10, aux_logits=False).fc.weight.shape
    (10, 2048)
    """
    check_pretrained("inception_v3", pretrained)
    return Inception3(**kwargs)


class BasicConv2d(nn.Module):
    """Bias-free convolution (``kwargs`` as ``nn.Conv2d``'s), BatchNorm with eps 1e-3, ReLU.

    >>> BasicConv2d(3, 8, kernel_size=3, padding=1)(jt.randn(1, 3, 5, 5)).shape
    (1, 8, 5, 5)
    """

    def __init__(self, in_channels, out_channels, **kwargs):
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def execute(self, x):
        return nn.relu(self.bn(self.conv(x)))


def _mean_pool(x):
    """The 3x3 average pool of the blocks' pool branch; padding counts as zeros, as in torchvision."""
    return nn.pool(x, 3, "mean", padding=1, stride=1)


class InceptionA(nn.Module):
    """35x35 block: 1x1, 5x5, double 3x3 and pooled branches, 224 + ``pool_features`` channels."""

    def __init__(self, in_channels, pool_features, conv_block=None):
        conv = conv_block or BasicConv2d
        self.branch1x1 = conv(in_channels, 64, kernel_size=1)
        self.branch5x5_1 = conv(in_channels, 48, kernel_size=1)
        self.branch5x5_2 = conv(48, 64, kernel_size=5, padding=2)
        self.branch3x3dbl_1 = conv(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = conv(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = conv(96, 96, kernel_size=3, padding=1)
        self.branch_pool = conv(in_channels, pool_features, kernel_size=1)

    def execute(self, x):
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return concat([self.branch1x1(x), b5, b3, self.branch_pool(_mean_pool(x))], dim=1)


class InceptionB(nn.Module):
    """Grid reduction 35x35 -> 17x17: strided 3x3, double 3x3 and max-pooled branches."""

    def __init__(self, in_channels, conv_block=None):
        conv = conv_block or BasicConv2d
        self.branch3x3 = conv(in_channels, 384, kernel_size=3, stride=2)
        self.branch3x3dbl_1 = conv(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = conv(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = conv(96, 96, kernel_size=3, stride=2)

    def execute(self, x):
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return concat([self.branch3x3(x), b3, nn.pool(x, 3, "maximum", stride=2)], dim=1)


class InceptionC(nn.Module):
    """17x17 block with 7x7 convolutions factorised into 1x7 and 7x1; 768 channels out."""

    def __init__(self, in_channels, channels_7x7, conv_block=None):
        conv, c7 = conv_block or BasicConv2d, channels_7x7
        self.branch1x1 = conv(in_channels, 192, kernel_size=1)
        self.branch7x7_1 = conv(in_channels, c7, kernel_size=1)
        self.branch7x7_2 = conv(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = conv(c7, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = conv(in_channels, c7, kernel_size=1)
        self.branch7x7dbl_2 = conv(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = conv(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = conv(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = conv(c7, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch_pool = conv(in_channels, 192, kernel_size=1)

    def execute(self, x):
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        d7 = self.branch7x7dbl_1(x)
        for layer in (self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4, self.branch7x7dbl_5):
            d7 = layer(d7)
        return concat([self.branch1x1(x), b7, d7, self.branch_pool(_mean_pool(x))], dim=1)


class InceptionD(nn.Module):
    """Grid reduction 17x17 -> 8x8: strided 3x3, 7x7-then-strided-3x3 and max-pooled branches."""

    def __init__(self, in_channels, conv_block=None):
        conv = conv_block or BasicConv2d
        self.branch3x3_1 = conv(in_channels, 192, kernel_size=1)
        self.branch3x3_2 = conv(192, 320, kernel_size=3, stride=2)
        self.branch7x7x3_1 = conv(in_channels, 192, kernel_size=1)
        self.branch7x7x3_2 = conv(192, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = conv(192, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = conv(192, 192, kernel_size=3, stride=2)

    def execute(self, x):
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
        return concat([b3, b7, nn.pool(x, 3, "maximum", stride=2)], dim=1)


class InceptionE(nn.Module):
    """8x8 block whose 3x3 branches split into parallel 1x3 and 3x1; 2048 channels out."""

    def __init__(self, in_channels, conv_block=None):
        conv = conv_block or BasicConv2d
        self.branch1x1 = conv(in_channels, 320, kernel_size=1)
        self.branch3x3_1 = conv(in_channels, 384, kernel_size=1)
        self.branch3x3_2a = conv(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = conv(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = conv(in_channels, 448, kernel_size=1)
        self.branch3x3dbl_2 = conv(448, 384, kernel_size=3, padding=1)
        self.branch3x3dbl_3a = conv(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = conv(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch_pool = conv(in_channels, 192, kernel_size=1)

    def execute(self, x):
        b3 = self.branch3x3_1(x)
        b3 = concat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], dim=1)
        d3 = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        d3 = concat([self.branch3x3dbl_3a(d3), self.branch3x3dbl_3b(d3)], dim=1)
        return concat([self.branch1x1(x), b3, d3, self.branch_pool(_mean_pool(x))], dim=1)


class InceptionAux(nn.Module):
    """The auxiliary classifier on the 17x17 maps: 5x5/3 average pool, 1x1 and 5x5 convs, linear."""

    def __init__(self, in_channels, num_classes, conv_block=None):
        conv = conv_block or BasicConv2d
        self.conv0 = conv(in_channels, 128, kernel_size=1)
        self.conv1 = conv(128, 768, kernel_size=5)
        self.fc = nn.Linear(768, num_classes)

    def execute(self, x):
        x = self.conv1(self.conv0(nn.pool(x, 5, "mean", stride=3)))
        return self.fc(nn.AdaptiveAvgPool2d(1)(x).reshape(x.shape[0], -1))


class Inception3(nn.Module):
    """Inception v3 for ``num_classes``; ``aux_logits`` builds the auxiliary classifier;
    ``inception_blocks`` replaces the seven block classes (conv, A, B, C, D, E, aux), as in
    torchvision; ``dropout`` is the rate before the classifier. ``init_weights`` is accepted (the
    layers' own initialisation is used)."""

    def __init__(self, num_classes=1000, aux_logits=True, inception_blocks=None, init_weights=True,
                 dropout=0.5):
        blocks = inception_blocks or [BasicConv2d, InceptionA, InceptionB, InceptionC, InceptionD,
                                      InceptionE, InceptionAux]
        if len(blocks) != 7:
            raise ValueError(f"Inception3: inception_blocks must list 7 classes, got {len(blocks)}")
        conv, block_a, block_b, block_c, block_d, block_e, aux = blocks
        self.aux_logits, self.dropout = bool(aux_logits), float(dropout)
        self.Conv2d_1a_3x3 = conv(3, 32, kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = conv(32, 32, kernel_size=3)
        self.Conv2d_2b_3x3 = conv(32, 64, kernel_size=3, padding=1)
        self.Conv2d_3b_1x1 = conv(64, 80, kernel_size=1)
        self.Conv2d_4a_3x3 = conv(80, 192, kernel_size=3)
        self.Mixed_5b, self.Mixed_5c, self.Mixed_5d = block_a(192, 32), block_a(256, 64), block_a(288, 64)
        self.Mixed_6a = block_b(288)
        self.Mixed_6b, self.Mixed_6c = block_c(768, channels_7x7=128), block_c(768, channels_7x7=160)
        self.Mixed_6d, self.Mixed_6e = block_c(768, channels_7x7=160), block_c(768, channels_7x7=192)
        if self.aux_logits:
            self.AuxLogits = aux(768, num_classes)
        self.Mixed_7a, self.Mixed_7b, self.Mixed_7c = block_d(768), block_e(1280), block_e(2048)
        self.fc = nn.Linear(2048, num_classes)

    def _features_17x17(self, x):
        for layer in (self.Conv2d_1a_3x3, self.Conv2d_2a_3x3, self.Conv2d_2b_3x3):
            x = layer(x)
        x = self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(nn.pool(x, 3, "maximum", stride=2)))
        x = nn.pool(x, 3, "maximum", stride=2)
        for layer in (self.Mixed_5b, self.Mixed_5c, self.Mixed_5d, self.Mixed_6a, self.Mixed_6b,
                      self.Mixed_6c, self.Mixed_6d, self.Mixed_6e):
            x = layer(x)
        return x

    def _head(self, x):
        x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))
        x = nn.AdaptiveAvgPool2d(1)(x).reshape(x.shape[0], -1)
        return self.fc(nn.dropout(x, self.dropout, self.is_train) if self.dropout else x)

    def forward_aux(self, x):
        """(logits, auxiliary logits or None): torchvision's training outputs. The auxiliary
        classifier needs inputs of about 299 x 299 (its 17x17 maps at least 17 wide).

        >>> [v.shape for v in inception_v3(num_classes=3).forward_aux(jt.randn(1, 3, 299, 299))]
        [(1, 3), (1, 3)]
        """
        x = self._features_17x17(x)
        return self._head(x), self.AuxLogits(x) if self.aux_logits else None

    def execute(self, x):
        return self._head(self._features_17x17(x))
