"""Checks the model zoo shares: the ``pretrained`` argument of the builders (accepted as in
Jittor, but only False, since jtmini downloads nothing; pretrained weights are loaded by name from
a file instead) and the image batch a model is called on (``check_images``).

    >>> check_pretrained("resnet18", False)          # fine: build with fresh weights
    >>> check_pretrained("resnet18", True)
    Traceback (most recent call last):
    ValueError: resnet18(pretrained=True): jtmini downloads no weights; build resnet18() and load ...
"""
import numpy as np

from ..var import Var


def check_pretrained(name, pretrained):
    """Refuse ``pretrained=True`` with an error saying how to load weights instead, and anything
    but a bool (``Resnet18(10)`` once meant 10 classes; Jittor's first argument is ``pretrained``).

        >>> check_pretrained("vgg16", False)
    """
    if not isinstance(pretrained, (bool, np.bool_)):
        raise TypeError(f"{name}: pretrained must be True or False, got {pretrained!r}; pass other "
                        f"arguments by name, e.g. {name}(num_classes=10)")
    if pretrained:
        raise ValueError(f"{name}(pretrained=True): jtmini downloads no weights; build {name}() and "
                         f"load saved ones by name with model.load(path) or "
                         f"model.load_state_dict(state) (a torchvision state dict loads once its "
                         f"num_batches_tracked entries are dropped)")


def check_images(who, x, least=1):
    """Refuse anything but an (N, 3, H, W) Var with H and W at least ``least``, naming ``who``.

        >>> check_images("AlexNet", jt.zeros(1, 3, 8, 8), least=63)
        Traceback (most recent call last):
        ValueError: AlexNet needs (N, 3, H, W) input with H, W >= 63, got (1, 3, 8, 8)
    """
    if not isinstance(x, Var) or x.ndim != 4 or x.shape[1] != 3 or min(x.shape[2:]) < least:
        got = x.shape if isinstance(x, Var) else type(x).__name__
        size = f" with H, W >= {least}" if least > 1 else ""
        raise ValueError(f"{who} needs (N, 3, H, W) input{size}, got {got}")
