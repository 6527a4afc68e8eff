"""The ``pretrained`` argument of the model builders: accepted as in Jittor, but only False, since
jtmini downloads nothing; pretrained weights are loaded by name from a file instead.

    >>> check_pretrained("resnet18", False)          # fine: build with fresh weights
    >>> check_pretrained("resnet18", True)
    Traceback (most recent call last):
    ValueError: resnet18(pretrained=True): jtmini downloads no weights; build resnet18() and load ...
"""
import numpy as np


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
