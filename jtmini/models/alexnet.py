"""AlexNet (Krizhevsky et al. 2012, torchvision's one-GPU form) with Jittor's builder ``alexnet`` and
torchvision's layout and parameter names (``features.0.weight``, ``classifier.6.bias``), so
torchvision's state dicts load by name.

Five convolutions (11x11/4, 5x5, three 3x3) with ReLU and three 3x3/2 max pools, adaptive average
pooling to 6x6, then a three-layer classifier with dropout. Inputs are 3 x 224 x 224 (63 x 63 at
least, for the three pools).

    >>> import jtmini as jt
    >>> from jtmini.models import alexnet
    >>> alexnet(num_classes=10)(jt.randn(1, 3, 64, 64)).shape
    (1, 10)
"""
from .. import nn
from ._pretrained import check_images, check_pretrained

__all__ = ["AlexNet", "alexnet"]


class AlexNet(nn.Module):
    """AlexNet for ``num_classes``; ``dropout`` is the classifier's dropout probability. Layers
    keep their own default initialisation, as torchvision's.

        >>> AlexNet(num_classes=5).classifier[6].weight.shape
        (5, 4096)
    """

    def __init__(self, num_classes=1000, dropout=0.5):
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2), nn.ReLU(),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2), nn.ReLU(),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 256, kernel_size=3, padding=1), nn.ReLU(),
            nn.Conv2d(256, 256, kernel_size=3, padding=1), nn.ReLU(),
            nn.MaxPool2d(kernel_size=3, stride=2))
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(),
            nn.Dropout(p=dropout), nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, num_classes))

    def execute(self, x):
        check_images("AlexNet", x, least=63)
        x = self.avgpool(self.features(x))
        return self.classifier(x.reshape(x.shape[0], -1))


def alexnet(pretrained=False, **kwargs):
    """AlexNet (61.1M parameters at 1000 classes); ``kwargs`` go to ``AlexNet``.

        >>> alexnet(num_classes=10).classifier[6].bias.shape
        (10,)
    """
    check_pretrained("alexnet", pretrained)
    return AlexNet(**kwargs)
