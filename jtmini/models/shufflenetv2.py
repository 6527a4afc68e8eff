"""ShuffleNet V2 (Ma et al. 2018) with Jittor's builders (``shufflenet_v2_x0_5``,
``shufflenet_v2_x1_0``, ``shufflenet_v2_x1_5``, ``shufflenet_v2_x2_0``) and torchvision's layout
and parameter names (``conv1.0.weight``, ``stage2.0.branch1.0.weight``, ``fc.bias``), so
torchvision's state dicts load by name.

A unit of stride 1 splits the channels in two, transforms one half (1x1, depthwise 3x3, 1x1) and
concatenates it with the other; a unit of stride 2 transforms both copies of its input. Each unit
then shuffles the channels of the two halves together.

    >>> import jtmini as jt
    >>> from jtmini.models import shufflenet_v2_x0_5
    >>> shufflenet_v2_x0_5(num_classes=10)(jt.randn(1, 3, 32, 32)).shape
    (1, 10)
"""
from .. import nn
from ..ops.reindex import concat
from ._pretrained import check_images, check_pretrained

__all__ = ["ShuffleNetV2", "InvertedResidual", "channel_shuffle", "shufflenet_v2_x0_5",
           "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0"]


def channel_shuffle(x, groups):
    """Interleave the channels of ``groups`` equal groups (channel ``g * k + i`` goes to
    ``i * groups + g``).

        >>> channel_shuffle(jt.array([0, 1, 2, 3]).reshape(1, 4, 1, 1), 2).reshape(-1).tolist()
        [0, 2, 1, 3]
    """
    batch, channels, height, width = x.shape
    if channels % groups:
        raise ValueError(f"channel_shuffle: {channels} channels do not split into {groups} groups")
    x = x.reshape(batch, groups, channels // groups, height, width).transpose(0, 2, 1, 3, 4)
    return x.reshape(batch, channels, height, width)


def _depthwise_conv(channels, stride):
    return nn.Conv2d(channels, channels, 3, stride, 1, bias=False, groups=channels)


class InvertedResidual(nn.Module):
    """A ShuffleNet V2 unit from ``inp`` to ``oup`` channels of ``stride`` (1 keeps the width).

        >>> InvertedResidual(8, 16, 2)(jt.randn(1, 8, 6, 6)).shape
        (1, 16, 3, 3)
    """

    def __init__(self, inp, oup, stride):
        if not 1 <= stride <= 3:
            raise ValueError(f"ShuffleNetV2 unit: stride must be 1, 2 or 3, got {stride}")
        branch_features = oup // 2
        if stride == 1 and inp != 2 * branch_features:
            raise ValueError(f"ShuffleNetV2 unit: stride 1 needs inp == oup (even), got {inp}, {oup}")
        self.stride = stride
        self.branch1 = nn.Sequential()
        if stride > 1:
            self.branch1 = nn.Sequential(
                _depthwise_conv(inp, stride), nn.BatchNorm2d(inp),
                nn.Conv2d(inp, branch_features, 1, 1, 0, bias=False), nn.BatchNorm2d(branch_features),
                nn.ReLU())
        self.branch2 = nn.Sequential(
            nn.Conv2d(inp if stride > 1 else branch_features, branch_features, 1, 1, 0, bias=False),
            nn.BatchNorm2d(branch_features), nn.ReLU(),
            _depthwise_conv(branch_features, stride), nn.BatchNorm2d(branch_features),
            nn.Conv2d(branch_features, branch_features, 1, 1, 0, bias=False),
            nn.BatchNorm2d(branch_features), nn.ReLU())

    def execute(self, x):
        if self.stride == 1:
            half = x.shape[1] // 2
            out = concat([x[:, :half], self.branch2(x[:, half:])], dim=1)
        else:
            out = concat([self.branch1(x), self.branch2(x)], dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """ShuffleNet V2 with ``stages_repeats`` (3 units per stage) and ``stages_out_channels`` (5:
    stem, three stages, final 1x1) for ``num_classes``; layers keep their default initialisation,
    as torchvision's.

        >>> ShuffleNetV2([1, 1, 1], [8, 16, 32, 64, 128], num_classes=5)(jt.randn(1, 3, 32, 32)).shape
        (1, 5)
    """

    def __init__(self, stages_repeats, stages_out_channels, num_classes=1000,
                 inverted_residual=InvertedResidual):
        if len(stages_repeats) != 3 or len(stages_out_channels) != 5:
            raise ValueError(f"ShuffleNetV2: expected 3 stages_repeats and 5 stages_out_channels, "
                             f"got {list(stages_repeats)} and {list(stages_out_channels)}")
        self._stage_out_channels = list(stages_out_channels)
        channels = stages_out_channels[0]
        self.conv1 = nn.Sequential(nn.Conv2d(3, channels, 3, 2, 1, bias=False),
                                   nn.BatchNorm2d(channels), nn.ReLU())
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        for stage, repeats, out in zip((2, 3, 4), stages_repeats, stages_out_channels[1:4]):
            units = [inverted_residual(channels, out, 2)]
            units += [inverted_residual(out, out, 1) for _ in range(repeats - 1)]
            setattr(self, f"stage{stage}", nn.Sequential(*units))
            channels = out
        last = stages_out_channels[-1]
        self.conv5 = nn.Sequential(nn.Conv2d(channels, last, 1, 1, 0, bias=False),
                                   nn.BatchNorm2d(last), nn.ReLU())
        self.fc = nn.Linear(last, num_classes)

    def execute(self, x):
        check_images("ShuffleNetV2", x)
        x = self.stage4(self.stage3(self.stage2(self.maxpool(self.conv1(x)))))
        return self.fc(self.conv5(x).mean(dims=(2, 3)))


def _shufflenetv2(name, out_channels, pretrained, kwargs):
    check_pretrained(name, pretrained)
    return ShuffleNetV2([4, 8, 4], out_channels, **kwargs)


def shufflenet_v2_x0_5(pretrained=False, **kwargs):
    """ShuffleNet V2 at 0.5x width (1.4M parameters); ``kwargs`` (not in Jittor's builder, e.g.
    ``num_classes``) go to ``ShuffleNetV2``: ``shufflenet_v2_x0_5(num_classes=10)``."""
    return _shufflenetv2("shufflenet_v2_x0_5", [24, 48, 96, 192, 1024], pretrained, kwargs)


def shufflenet_v2_x1_0(pretrained=False, **kwargs):
    """ShuffleNet V2 at 1x width (2.3M parameters): ``shufflenet_v2_x1_0(num_classes=10)``."""
    return _shufflenetv2("shufflenet_v2_x1_0", [24, 116, 232, 464, 1024], pretrained, kwargs)


def shufflenet_v2_x1_5(pretrained=False, **kwargs):
    """ShuffleNet V2 at 1.5x width (3.5M parameters): ``shufflenet_v2_x1_5(num_classes=10)``."""
    return _shufflenetv2("shufflenet_v2_x1_5", [24, 176, 352, 704, 1024], pretrained, kwargs)


def shufflenet_v2_x2_0(pretrained=False, **kwargs):
    """ShuffleNet V2 at 2x width (7.4M parameters): ``shufflenet_v2_x2_0(num_classes=10)``."""
    return _shufflenetv2("shufflenet_v2_x2_0", [24, 244, 488, 976, 2048], pretrained, kwargs)
