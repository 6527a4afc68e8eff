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
from .activation import (ELU, GELU, Hardtanh, LogSoftmax, Mish, PReLU, ReLU6, SiLU, Softmax, Softplus, elu, gelu,
                         hardtanh, mish, relu6, silu, softplus)
from .activation_more import (CELU, GLU, SELU, CosineSimilarity, Hardshrink, Hardsigmoid, Hardswish, HuberLoss, LogSigmoid,
                              PairwiseDistance, SoftMarginLoss, Softmin, Softshrink, Softsign, Tanhshrink, Threshold,
                              Unflatten, celu, cosine_similarity, glu, hardshrink, hardsigmoid, hardswish, huber_loss,
                              pairwise_distance, selu, soft_margin_loss, softmin, softshrink, softsign, tanhshrink,
                              threshold, unflatten)
from .attention import MultiheadAttention
from .containers import ModuleDict, ModuleList, ParameterDict, ParameterList
from .conv import Conv, Conv2d, conv2d
from .ctc import CTCLoss, ctc_loss
from .grid import affine_grid, grid_sample
from .conv_more import Conv1d, ConvTranspose, ConvTranspose2d, conv1d, conv_transpose, conv_transpose2d
from .volumetric import Conv3d, ConvTranspose3d, conv3d, conv_transpose3d
from .sparse import Embedding, embedding
from .fold import fold, unfold
from .functional import (bce_loss, binary_cross_entropy_with_logits, cross_entropy_loss, dropout, flatten,
                         kl_div, l1_loss, leaky_relu, linear, log_softmax, mse_loss, nll_loss, one_hot, relu,
                         sigmoid, smooth_l1_loss, softmax, tanh)
from .layers import (Bilinear, bilinear, BatchNorm, BatchNorm1d, BatchNorm2d, BatchNorm3d, Dropout, Flatten, Identity,
                     LeakyReLU, Leaky_relu, Linear, Parameter, ReLU, Relu, Sigmoid, Tanh, identity, skip_init)
from .losses import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, KLDivLoss, L1Loss, MSELoss, NLLLoss,
                     SmoothL1Loss)
from .module import Module, Sequential
from .norm import (GroupNorm, InstanceNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, LayerNorm, LayerNorm1d,
                   LayerNorm2d, LayerNorm3d, batch_norm, group_norm, instance_norm, layer_norm)
from .products import baddbmm, bmm_transpose, kron, matmul_transpose, scaled_dot_product_attention
from ..persist import load, save
from .pool import (AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool2d, AdaptiveMaxPool3d, AvgPool2d, AvgPool3d,
                   MaxPool2d, MaxPool3d, MaxUnpool2d, MaxUnpool3d, Pool, Pool3d, adaptive_avg_pool2d, adaptive_avg_pool3d,
                   adaptive_max_pool2d, adaptive_max_pool3d, avg_pool2d, avg_pool3d, max_pool2d, max_pool3d, pool, pool2d,
                   pool3d)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell
from .resample import (ConstantPad2d, DropPath, Dropout2d, PixelShuffle, ReflectionPad2d, ReplicationPad2d, Resize,
                       Upsample, UpsamplingBilinear2d, UpsamplingNearest2d, ZeroPad2d, droppath, dropout2d,
                       interpolate, pad, pixel_shuffle, resize, upsample)

from ..ops.registry import FUNCTIONS as _FUNCTIONS

# Jittor's nn namespace holds its batched products too (nn.matmul, nn.bmm)
matmul, bmm = _FUNCTIONS["matmul"], _FUNCTIONS["bmm"]
# and some of its tensor functions: nn.logsumexp, nn.log_sigmoid, nn.sign, nn.tensordot
logsumexp, log_sigmoid, sign, tensordot = (_FUNCTIONS[n] for n in ("logsumexp", "log_sigmoid", "sign", "tensordot"))
logsigmoid = log_sigmoid       # PyTorch's F.logsigmoid

_OPTIMIZERS = ("Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adan", "LRScheduler", "LambdaLR", "opt_grad")


def __getattr__(name):
    # optimizers are imported on first use: jtmini.optim is not needed to build a model
    if name in _OPTIMIZERS:
        from .. import optim
        return getattr(optim, name)
    if name == "init":                  # Jittor's nn.py imports init: models call nn.init.xavier_uniform_
        from .. import init
        return init
    if name == "deepcopy":              # Jittor's nn.py star-imports its optim, which imports deepcopy
        import copy
        return copy.deepcopy
    raise AttributeError(f"module 'jtmini.nn' has no attribute {name!r}")


__all__ = sorted(name for name in dir() if not name.startswith("_")
                 and name not in ("activation", "activation_more", "arguments", "attention", "containers", "conv", "conv_more", "ctc", "functional", "grid",
                                  "layers", "losses", "module", "norm", "persist", "pool", "products", "resample", "rnn", "sparse", "volumetric"))
__all__ += list(_OPTIMIZERS)
