"""Neural-network layers, functions and losses, Jittor style (``jt.nn``).

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
    ...                       nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    >>> optimizer = nn.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> x, y = jt.randn(4, 1, 28, 28), jt.array([1, 2, 3, 4])
    >>> optimizer.step(nn.cross_entropy_loss(model(x), y))     # backward + update, one schedule

The optimizers live in ``jtmini.optim`` and are re-exported here (``nn.SGD``), as in Jittor.
"""
from .conv import Conv, Conv2d, conv2d
from .functional import (cross_entropy_loss, dropout, flatten, l1_loss, leaky_relu, linear,
                         log_softmax, mse_loss, nll_loss, one_hot, relu, sigmoid, softmax, tanh)
from .layers import (BatchNorm, BatchNorm1d, BatchNorm2d, Dropout, Flatten, Identity, LeakyReLU,
                     Leaky_relu, Linear, ReLU, Relu, Sigmoid, Tanh)
from .module import Module, Sequential
from .persist import load, save
from .pool import (AdaptiveAvgPool2d, AvgPool2d, MaxPool2d, adaptive_avg_pool2d, avg_pool2d,
                   max_pool2d)

_OPTIMIZERS = ("Optimizer", "SGD", "Adam", "AdamW")


def __getattr__(name):
    # optimizers are imported on first use: jtmini.optim is not needed to build a model
    if name in _OPTIMIZERS:
        from .. import optim
        return getattr(optim, name)
    raise AttributeError(f"module 'jtmini.nn' has no attribute {name!r}")


__all__ = ["AdaptiveAvgPool2d", "AvgPool2d", "BatchNorm", "BatchNorm1d", "BatchNorm2d", "Conv",
           "Conv2d", "Dropout", "Flatten", "Identity", "LeakyReLU", "Leaky_relu", "Linear",
           "MaxPool2d", "Module", "ReLU", "Relu", "Sequential", "Sigmoid", "Tanh",
           "adaptive_avg_pool2d", "avg_pool2d", "conv2d", "cross_entropy_loss", "dropout", "flatten",
           "l1_loss", "leaky_relu", "linear", "load", "log_softmax", "max_pool2d", "mse_loss",
           "nll_loss", "one_hot", "relu", "save", "sigmoid", "softmax", "tanh", *_OPTIMIZERS]
