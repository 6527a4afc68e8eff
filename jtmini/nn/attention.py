"""Multi-head attention with PyTorch's parameters, signature and semantics, composed from
``linear``, ``bmm`` and ``softmax``: its state_dict loads from ``torch.nn.MultiheadAttention``'s
by name (``in_proj_weight``, ``in_proj_bias``, ``out_proj.weight``, ``out_proj.bias``; with
kdim/vdim, ``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight``; with add_bias_kv, ``bias_k``
and ``bias_v``). Self-attention (one Var as query, key and value) without weights returned,
dropout, padding or extra keys runs the packed projection through the fused kernels of
``ops/self_attention.py`` (the same values, 3 graph nodes in place of ~40).

    >>> import jtmini as jt
    >>> from jtmini.nn.attention import MultiheadAttention
    >>> attn = MultiheadAttention(16, 4, batch_first=True)
    >>> x = jt.randn(2, 5, 16)
    >>> out, weights = attn(x, x, x)
    >>> out.shape, weights.shape
    ((2, 5, 16), (2, 5, 5))
"""
import math

from .. import dtypes, init
from ..creation import zeros
from ..ops.elementwise import where
from ..ops.reindex import concat
from ..ops.self_attention import packed_self_attention
from ..ops.softmax import softmax_last
from ..var import Var
from . import functional as F
from .arguments import count, real
from .layers import Linear
from .module import Module


def _float_var(name, value, ndims):
    """``value`` if it is a float Var with one of ``ndims`` dims; TypeError or ValueError naming it."""
    if not isinstance(value, Var):
        raise TypeError(f"MultiheadAttention: {name} must be a jtmini Var, got {type(value).__name__}")
    if not dtypes.is_float(value.dtype):
        raise TypeError(f"MultiheadAttention: {name} must be float32 or float64, got {value.dtype}")
    if value.ndim not in ndims:
        raise ValueError(f"MultiheadAttention: {name} must have {' or '.join(map(str, ndims))} dims "
                         f"(3: batched, 2: one sequence), got shape {value.shape}")
    return value


def _additive_mask(name, mask, shapes, dtype):
    """``mask`` as a float Var of ``dtype`` to add to the attention scores (None stays None): a
    bool mask is -inf where True (that key is not attended), a float one is added as it is. Its
    shape must be one of ``shapes``."""
    if mask is None:
        return None
    if not isinstance(mask, Var):
        raise TypeError(f"MultiheadAttention: {name} must be a jtmini Var or None, got {type(mask).__name__}")
    if mask.dtype != "bool" and not dtypes.is_float(mask.dtype):
        raise TypeError(f"MultiheadAttention: {name} must be bool or float, got {mask.dtype}")
    if mask.shape not in shapes:
        raise ValueError(f"MultiheadAttention: {name} must have shape {' or '.join(map(str, shapes))}, "
                         f"got {mask.shape}")
    if mask.dtype == "bool":
        return where(mask, float("-inf"), 0.0).cast(dtype)
    return mask.cast(dtype)


class MultiheadAttention(Module):
    """Multi-head attention as ``torch.nn.MultiheadAttention``: ``forward(query, key, value)``
    returns ``(output, weights)``. Sequences are (L, N, E) (``batch_first``: (N, L, E)), or (L, E)
    for one sequence. ``key_padding_mask`` (N, S) and ``attn_mask`` (L, S) or (N * num_heads, L, S)
    are bool (True: not attended) or float (added to the scores), e.g. a causal mask
    ``jt.ones(L, L).triu(1) > 0``. ``weights`` are averaged over the heads unless
    ``average_attn_weights=False``, and None with ``need_weights=False``. ``dropout`` drops
    attention weights in training mode. Weights are initialised as PyTorch's: Xavier-uniform
    projections, zero biases, Xavier-normal ``bias_k``/``bias_v``, in ``dtype``.

    >>> attn = nn.MultiheadAttention(8, 2)
    >>> q, kv = jt.randn(3, 2, 8), jt.randn(4, 2, 8)
    >>> out, w = attn(q, kv, kv, key_padding_mask=jt.array([[False] * 3 + [True]] * 2))
    >>> out.shape, w.shape
    ((3, 2, 8), (2, 3, 4))
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, dtype="float32"):
        who = "MultiheadAttention"
        self.embed_dim, self.num_heads = count(who, "embed_dim", embed_dim), count(who, "num_heads", num_heads)
        if self.embed_dim % self.num_heads:
            raise ValueError(f"{who}: embed_dim ({self.embed_dim}) must be divisible by num_heads ({self.num_heads})")
        self.dropout = real(who, "dropout", dropout)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"{who}: dropout must be in [0, 1), got {dropout!r}")
        self.kdim = self.embed_dim if kdim is None else count(who, "kdim", kdim)
        self.vdim = self.embed_dim if vdim is None else count(who, "vdim", vdim)
        self.head_dim = self.embed_dim // self.num_heads
        self.batch_first, self.add_zero_attn = batch_first, add_zero_attn
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = init.xavier_uniform((3 * e, e))
        else:
            self.q_proj_weight = init.xavier_uniform((e, e))
            self.k_proj_weight = init.xavier_uniform((e, self.kdim))
            self.v_proj_weight = init.xavier_uniform((e, self.vdim))
        self.in_proj_bias = init.constant((3 * e,), "float32", 0.0) if bias else None
        self.out_proj = Linear(e, e, bias=bias)
        if bias:
            self.out_proj.bias = init.constant((e,), "float32", 0.0)
        self.bias_k = init.xavier_gauss((1, 1, e)) if add_bias_kv else None
        self.bias_v = init.xavier_gauss((1, 1, e)) if add_bias_kv else None
        if dtypes.canonical(dtype) != "float32":        # Jittor's and PyTorch's dtype= of the weights
            self._cast_parameters(dtypes.canonical(dtype))

    def execute(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        query = _float_var("query", query, (2, 3))
        key, value = _float_var("key", key, (query.ndim,)), _float_var("value", value, (query.ndim,))
        if is_causal and attn_mask is None:
            raise ValueError("MultiheadAttention: is_causal is a hint that attn_mask is causal; pass the "
                             "causal attn_mask itself (e.g. jt.ones(L, L).triu(1) > 0)")
        if query.ndim == 2:      # one sequence: a batch of one, in the (L, N, E) layout
            out, weights = self._attend(query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1),
                                        key_padding_mask, attn_mask, need_weights, average_attn_weights, False, 0)
            return out.squeeze(1), (None if weights is None else weights.squeeze(0))
        # attended in the layout given: transposing (N, L, E) inputs first made each projection
        # gather its input, and the output be transposed back
        return self._attend(query, key, value, key_padding_mask, attn_mask, need_weights, average_attn_weights,
                            True, 1 if self.batch_first else 0)

    def _check_shapes(self, query, key, value, seq):
        """Refuse feature sizes other than embed_dim / kdim / vdim, and key and value (or the
        batches) that do not line up; sequences along dim ``seq`` (0: (L, N, E), 1: (N, L, E))."""
        for name, v, want in (("query", query, self.embed_dim), ("key", key, self.kdim), ("value", value, self.vdim)):
            if v.shape[-1] != want:
                raise ValueError(f"MultiheadAttention: {name}'s last dim must be {want}, got shape {v.shape}")
        if key.shape[:2] != value.shape[:2] or key.shape[1 - seq] != query.shape[1 - seq]:
            raise ValueError(f"MultiheadAttention: key {key.shape} and value {value.shape} must have the same "
                             f"length, and the batch of query {query.shape}")

    def _masks(self, key_padding_mask, attn_mask, query, key, batched, seq):
        """Both masks as additive float Vars shaped to broadcast against the (N, heads, L, S)
        scores: (1 or N * heads, L, S) and (N, 1, 1, S) (or None), checked against the inputs."""
        tgt, n, src, heads = query.shape[seq], query.shape[1 - seq], key.shape[seq], self.num_heads
        heads_shape = (n * heads, tgt, src) if batched else (heads, tgt, src)
        attn = _additive_mask("attn_mask", attn_mask, [(tgt, src), heads_shape], query.dtype)
        padding = _additive_mask("key_padding_mask", key_padding_mask, [(n, src) if batched else (src,)],
                                 query.dtype)
        attn = None if attn is None else attn.reshape((-1, tgt, src))
        padding = None if padding is None else padding.reshape(n, 1, 1, src)
        return attn, padding

    def _project(self, query, key, value):
        """The query, key and value projections, each in its input's layout with embed_dim features."""
        e, b = self.embed_dim, self.in_proj_bias
        if self._qkv_same_embed_dim and query is key and key is value:
            # self-attention: one (rows, 3 * embed_dim) product, as PyTorch's packed in-projection;
            # three products of a third each, and their gradients, were 6 more products a layer
            qkv = F.linear(query, self.in_proj_weight, b)
            return [qkv[..., k * e:(k + 1) * e] for k in range(3)]
        if self._qkv_same_embed_dim:
            weights = [self.in_proj_weight[k * e:(k + 1) * e] for k in range(3)]
        else:
            weights = [self.q_proj_weight, self.k_proj_weight, self.v_proj_weight]
        biases = [None] * 3 if b is None else [b[k * e:(k + 1) * e] for k in range(3)]
        return [F.linear(x, w, bias) for x, w, bias in zip((query, key, value), weights, biases)]

    def _extend_keys(self, k, v, attn, padding, seq):
        """Append ``bias_k``/``bias_v`` and (``add_zero_attn``) a zero key and value to every
        sequence (along dim ``seq``), with a 0 (attended) column in each mask for each key added."""
        shape = [k.shape[1 - seq]] * 2 + [self.embed_dim]
        shape[seq] = 1
        if self.bias_k is not None:
            k = concat([k, self.bias_k.broadcast_to(tuple(shape)).cast(k.dtype)], dim=seq)
            v = concat([v, self.bias_v.broadcast_to(tuple(shape)).cast(v.dtype)], dim=seq)
        if self.add_zero_attn:
            k = concat([k, zeros(tuple(shape), dtype=k.dtype)], dim=seq)
            v = concat([v, zeros(tuple(shape), dtype=v.dtype)], dim=seq)
        added = int(self.bias_k is not None) + int(self.add_zero_attn)
        if added:
            attn = None if attn is None else attn.pad((0, added))
            padding = None if padding is None else padding.pad((0, added))
        return k, v, attn, padding

    def _packs(self, query, key, value, attn_mask, padding):
        """Whether the attention runs as ``packed_self_attention``'s kernels: self-attention with
        the packed projection, no extra keys, dropout or padding mask, and a bool (L, S) mask or
        none (its additive form needs no gradient)."""
        return (self._qkv_same_embed_dim and query is key and key is value and self.bias_k is None
                and not self.add_zero_attn and padding is None and (self.dropout == 0 or not self.is_train)
                and (attn_mask is None or (attn_mask.dtype == "bool" and attn_mask.ndim == 2)))

    def _attend_packed(self, x, attn, seq):
        """Self-attention of ``x`` through one packed projection and the fused attention
        kernels (ops/self_attention.py; composed there where they do not apply): 3 graph nodes
        in place of ~40."""
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        bias = None if attn is None else attn.reshape(attn.shape[1:])
        out = packed_self_attention(qkv, self.num_heads, seq, 1.0 / math.sqrt(self.head_dim), bias)
        return self.out_proj(out.reshape(-1, self.embed_dim)).reshape(out.shape)

    def _heads(self, x, seq):
        """A projection with sequences along dim ``seq`` -> (N, heads, length, head_dim), a view."""
        x = x.reshape(x.shape[0], x.shape[1], self.num_heads, self.head_dim)
        return x.permute(1, 2, 0, 3) if seq == 0 else x.permute(0, 2, 1, 3)

    def _attend(self, query, key, value, key_padding_mask, attn_mask, need_weights, average, batched, seq):
        """Attention of ``query`` (L, N, E) over ``key``/``value`` (S, N, kdim/vdim), or all
        (N, length, features) with ``seq`` 1: the output in that layout, and the weights (N, L, S),
        or (N, heads, L, S) unless ``average``, or None."""
        self._check_shapes(query, key, value, seq)
        tgt, n, e, heads = query.shape[seq], query.shape[1 - seq], self.embed_dim, self.num_heads
        attn, padding = self._masks(key_padding_mask, attn_mask, query, key, batched, seq)
        if not need_weights and self._packs(query, key, value, attn_mask, padding):
            return self._attend_packed(query, attn, seq), None
        q, k, v = self._project(query, key, value)
        k, v, attn, padding = self._extend_keys(k, v, attn, padding, seq)
        q, k, v = self._heads(q, seq), self._heads(k, seq), self._heads(v, seq)
        scores = (q * (1.0 / math.sqrt(self.head_dim))) @ k.transpose(2, 3)      # (N, heads, L, S)
        if padding is not None:
            scores = scores + padding
        if attn is not None and attn.shape[0] != 1:
            scores, attn = scores + attn.reshape(n, heads, tgt, -1), None
        # a mask shared by every head and sequence is added inside the softmax kernel
        bias = None if attn is None else attn.reshape(attn.shape[1:])
        weights = F.dropout(softmax_last(scores, bias), self.dropout, self.is_train)
        out = (weights @ v).permute((2, 0, 1, 3) if seq == 0 else (0, 2, 1, 3))
        out = self.out_proj(out.reshape(tgt * n, e))
        out = out.reshape((tgt, n, e) if seq == 0 else (n, tgt, e))
        if not need_weights:
            return out, None
        return out, (weights.mean(dims=1) if average else weights)
