"""einops' ``Rearrange``, ``Reduce`` and ``EinMix`` as jtmini Modules, under Jittor's module path
``jittor.einops.layers.jittor``; the pattern handling is einops' own mixins.

    >>> from jtmini.einops.layers.jittor import Rearrange, EinMix
    >>> Rearrange("b c h w -> b (h w) c")(jt.randn(2, 3, 4, 4)).shape
    (2, 16, 3)
    >>> EinMix("b t c -> b t d", weight_shape="c d", bias_shape="d", c=3, d=5)(jt.randn(2, 7, 3)).shape
    (2, 7, 5)
"""
from einops.layers import RearrangeMixin, ReduceMixin
from einops.layers._einmix import _EinmixMixin

from ... import init
from ...nn.module import Module
from ...ops.registry import FUNCTIONS


class Rearrange(RearrangeMixin, Module):
    """``einops.rearrange`` with a fixed pattern, as a layer."""

    def execute(self, input):
        return self._apply_recipe(input)


class Reduce(ReduceMixin, Module):
    """``einops.reduce`` with a fixed pattern and reduction, as a layer."""

    def execute(self, input):
        return self._apply_recipe(input)


class EinMix(_EinmixMixin, Module):
    """einops' ``EinMix``: an einsum of the input with a weight (and an added bias), both
    initialised uniform in +-bound as einops does."""

    def _create_parameters(self, weight_shape, weight_bound, bias_shape, bias_bound):
        self.weight = init.uniform(tuple(weight_shape), "float32", -weight_bound, weight_bound)
        self.bias = None if bias_shape is None else init.uniform(tuple(bias_shape), "float32", -bias_bound, bias_bound)

    def _create_rearrange_layers(self, pre_reshape_pattern, pre_reshape_lengths, post_reshape_pattern,
                                 post_reshape_lengths):
        self.pre_rearrange = None if pre_reshape_pattern is None else \
            Rearrange(pre_reshape_pattern, **pre_reshape_lengths)
        self.post_rearrange = None if post_reshape_pattern is None else \
            Rearrange(post_reshape_pattern, **post_reshape_lengths)

    def execute(self, input):
        if self.pre_rearrange is not None:
            input = self.pre_rearrange(input)
        result = FUNCTIONS["einsum"](self.einsum_pattern, input, self.weight)
        if self.bias is not None:
            result = result + self.bias
        if self.post_rearrange is not None:
            result = self.post_rearrange(result)
        return result
