"""Jittor's ``jittor.attention``. In Jittor 1.3.11 its ``MultiheadAttention`` is PyTorch's (one
``in_proj_weight``, ``execute(query, key, value, key_padding_mask, need_weights, attn_mask,
...)``): here the same class as ``nn.MultiheadAttention``, with ``scaled_dot_product_attention``,
``baddbmm`` and ``multi_head_attention_forward`` (the layer's computation with its weights
passed in) beside it. Earlier Jittor releases had fairseq's multi-head attention under that
name, with separate ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj`` Linear layers (a fairseq
state_dict loads by name): that is ``FairseqMultiheadAttention``, and ``MultiheadAttention``
given one of fairseq's own keywords (``self_attention``, ...) makes one. Sequences are (length,
batch, embed_dim).

    >>> import jtmini as jt
    >>> x = jt.randn(5, 2, 16)
    >>> out, weights = jt.attention.MultiheadAttention(16, 4, 0.0)(x, x, x)
    >>> out.shape, weights.shape
    ((5, 2, 16), (2, 5, 5))
    >>> type(jt.attention.MultiheadAttention(16, 4, self_attention=True)).__name__
    'FairseqMultiheadAttention'
"""
import math

from . import init
from .creation import zeros
from .ops.reindex import concat
from .nn import functional as F
from .nn.arguments import count
from .nn.attention import MultiheadAttention as _TorchLayout
from .nn.attention import _additive_mask, _float_var, multi_head_attention_forward  # noqa: F401
from .nn.layers import Linear
from .nn.module import Module
from .nn.products import baddbmm, scaled_dot_product_attention  # noqa: F401   (Jittor keeps them here)

_FAIRSEQ_KEYWORDS = frozenset(("self_attention", "encoder_decoder_attention", "q_noise", "qn_block_size"))


class MultiheadAttention(_TorchLayout):
    """Jittor 1.3.11's ``jittor.attention.MultiheadAttention``: ``nn.MultiheadAttention``
    (PyTorch's), whose arguments it takes in the same order. Given one of fairseq's keywords
    (``self_attention``, ``encoder_decoder_attention``, ``q_noise``, ``qn_block_size``), as code
    for earlier Jittor releases passes, it makes a ``FairseqMultiheadAttention`` instead.

    >>> MultiheadAttention(8, 2, 0.1, batch_first=True).in_proj_weight.shape
    (24, 8)
    """

    def __new__(cls, *args, **kwargs):
        if cls is MultiheadAttention and _FAIRSEQ_KEYWORDS & kwargs.keys():
            return FairseqMultiheadAttention(*args, **kwargs)
        return super().__new__(cls)


class FairseqMultiheadAttention(Module):
    """fairseq's multi-head attention (``jittor.attention.MultiheadAttention`` in earlier Jittor
    releases): ``execute(query, key, value)`` returns ``(output, weights)``, output (L, N, E),
    weights (N, L, S) averaged over heads (``need_head_weights``: (heads, N, L, S);
    ``need_weights=False``: None). ``self_attention`` projects the query for
    all three; ``encoder_decoder_attention`` projects ``key`` for key and value.
    ``key_padding_mask`` (N, S) is True at padding; ``attn_mask`` (L, S) is added to the scores
    (a bool one is -inf where True). ``before_softmax`` returns (scores, projected values).

    >>> att = FairseqMultiheadAttention(8, 2)
    >>> q, kv = jt.randn(3, 2, 8), jt.randn(4, 2, 8)
    >>> att(q, kv, kv)[1].shape
    (2, 3, 4)
    """

    def __init__(self, embed_dim, num_heads, kdim=None, vdim=None, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, self_attention=False, encoder_decoder_attention=False, q_noise=0.0,
                 qn_block_size=8):
        who = "FairseqMultiheadAttention"
        self.embed_dim, self.num_heads = count(who, "embed_dim", embed_dim), count(who, "num_heads", num_heads)
        if self.embed_dim % self.num_heads:
            raise ValueError(f"{who}: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        if q_noise:
            raise NotImplementedError(f"{who}: quantization noise (q_noise={q_noise}) is not supported")
        self.kdim = self.embed_dim if kdim is None else count(who, "kdim", kdim)
        self.vdim = self.embed_dim if vdim is None else count(who, "vdim", vdim)
        self.head_dim, self.dropout = self.embed_dim // self.num_heads, float(dropout)
        self.scaling = self.head_dim ** -0.5
        self.self_attention, self.encoder_decoder_attention = self_attention, encoder_decoder_attention
        if self_attention and not (self.kdim == self.vdim == self.embed_dim):
            raise ValueError(f"{who}: self_attention needs kdim and vdim equal to embed_dim ({embed_dim})")
        e = self.embed_dim
        self.k_proj, self.v_proj = Linear(self.kdim, e, bias=bias), Linear(self.vdim, e, bias=bias)
        self.q_proj, self.out_proj = Linear(e, e, bias=bias), Linear(e, e, bias=bias)
        self.bias_k = init.xavier_gauss((1, 1, e)) if add_bias_kv else None
        self.bias_v = init.xavier_gauss((1, 1, e)) if add_bias_kv else None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        # fairseq's init: a smaller gain when q, k and v share a size (their sum is scaled back)
        gain = 1 / math.sqrt(2) if self.kdim == self.vdim == self.embed_dim else 1.0
        for proj in (self.k_proj, self.v_proj, self.q_proj):
            init.xavier_uniform_(proj.weight, gain=gain)
        init.xavier_uniform_(self.out_proj.weight)
        if self.out_proj.bias is not None:
            init.constant_(self.out_proj.bias, 0.0)

    def _project(self, query, key, value):
        q = self.q_proj(query) * self.scaling
        if self.self_attention:
            return q, self.k_proj(query), self.v_proj(query)
        if self.encoder_decoder_attention:
            return q, self.k_proj(key), self.v_proj(key)
        return q, self.k_proj(key), self.v_proj(value)

    def _extend(self, k, v, attn, padding):
        """bias_k/bias_v and (add_zero_attn) zero keys appended, with an attended mask column each."""
        n, e = k.shape[1], self.embed_dim
        extra = []
        if self.bias_k is not None:
            extra.append((self.bias_k.broadcast_to((1, n, e)), self.bias_v.broadcast_to((1, n, e))))
        if self.add_zero_attn:
            extra.append((zeros((1, n, e), dtype=k.dtype), zeros((1, n, e), dtype=v.dtype)))
        for bk, bv in extra:
            k, v = concat([k, bk.cast(k.dtype)], dim=0), concat([v, bv.cast(v.dtype)], dim=0)
        if extra:
            attn = None if attn is None else attn.pad((0, len(extra)))
            padding = None if padding is None else padding.pad((0, len(extra)))
        return k, v, attn, padding

    def _heads(self, x):
        return x.reshape(x.shape[0], x.shape[1] * self.num_heads, self.head_dim).transpose(0, 1)

    def execute(self, query, key=None, value=None, key_padding_mask=None, incremental_state=None,
                need_weights=True, static_kv=False, attn_mask=None, before_softmax=False,
                need_head_weights=False):
        if incremental_state is not None:
            raise NotImplementedError("FairseqMultiheadAttention: incremental_state (cached decoding) is not supported")
        query = _float_var("query", query, (3,))
        key = query if key is None else _float_var("key", key, (3,))
        value = key if value is None else _float_var("value", value, (3,))
        (tgt, n, e), src, heads = query.shape, (query if self.self_attention else key).shape[0], self.num_heads
        if e != self.embed_dim:
            raise ValueError(f"FairseqMultiheadAttention: query's last dim must be {self.embed_dim}, got {query.shape}")
        attn = _additive_mask("attn_mask", attn_mask, [(tgt, src)], query.dtype)
        padding = _additive_mask("key_padding_mask", key_padding_mask, [(n, src)], query.dtype)
        q, k, v = self._project(query, key, value)
        k, v, attn, padding = self._extend(k, v, attn, padding)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        scores = q @ k.transpose(1, 2)
        if attn is not None:
            scores = scores + attn.unsqueeze(0)
        if padding is not None:
            scores = (scores.reshape(n, heads, tgt, -1) + padding.reshape(n, 1, 1, -1)).reshape(n * heads, tgt, -1)
        if before_softmax:
            return scores, v
        weights = F.softmax(scores, dim=-1)
        out = F.dropout(weights, self.dropout, self.is_train) @ v
        out = self.out_proj(out.transpose(0, 1).reshape(tgt, n, e))
        if not (need_weights or need_head_weights):
            return out, None
        weights = weights.reshape(n, heads, tgt, -1).transpose(0, 1)
        return out, (weights if need_head_weights else weights.mean(dims=0))


__all__ = ["FairseqMultiheadAttention", "MultiheadAttention", "baddbmm", "multi_head_attention_forward",
           "scaled_dot_product_attention"]
