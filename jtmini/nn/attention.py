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
from typing import Callable, NamedTuple, Optional

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


def _float_var(name, value, ndims, who="MultiheadAttention"):
    """``value`` if it is a float Var with one of ``ndims`` dims; TypeError or ValueError naming it."""
    if not isinstance(value, Var):
        raise TypeError(f"{who}: {name} must be a jtmini Var, got {type(value).__name__}")
    if not dtypes.is_float(value.dtype):
        raise TypeError(f"{who}: {name} must be float32 or float64, got {value.dtype}")
    if value.ndim not in ndims:
        raise ValueError(f"{who}: {name} must have {' or '.join(map(str, ndims))} dims "
                         f"(3: batched, 2: one sequence), got shape {value.shape}")
    return value


def _additive_mask(name, mask, shapes, dtype, who="MultiheadAttention"):
    """``mask`` as a float Var of ``dtype`` to add to the attention scores (None stays None): a
    bool mask is -inf where True (that key is not attended), a float one is added as it is. Its
    shape must be one of ``shapes``."""
    if mask is None:
        return None
    if not isinstance(mask, Var):
        raise TypeError(f"{who}: {name} must be a jtmini Var or None, got {type(mask).__name__}")
    if mask.dtype != "bool" and not dtypes.is_float(mask.dtype):
        raise TypeError(f"{who}: {name} must be bool or float, got {mask.dtype}")
    if mask.shape not in shapes:
        raise ValueError(f"{who}: {name} must have shape {' or '.join(map(str, shapes))}, got {mask.shape}")
    if mask.dtype == "bool":
        return where(mask, float("-inf"), 0.0).cast(dtype)
    return mask.cast(dtype)


class _Attention(NamedTuple):
    """What one multi-head attention computes with: the layer's, or ``multi_head_attention_forward``'s
    arguments. ``in_proj_weight`` is the packed (3 * embed_dim, embed_dim) projection, None where
    ``q/k/v_proj_weight`` are separate; ``dropout`` is the probability applied (0 outside
    training); ``out_proj`` maps (rows, embed_dim) to (rows, embed_dim)."""
    who: str
    embed_dim: int
    num_heads: int
    in_proj_weight: Optional[Var]
    in_proj_bias: Optional[Var]
    q_proj_weight: Optional[Var]
    k_proj_weight: Optional[Var]
    v_proj_weight: Optional[Var]
    bias_k: Optional[Var]
    bias_v: Optional[Var]
    add_zero_attn: bool
    dropout: float
    out_proj: Callable

    @property
    def head_dim(self):
        return self.embed_dim // self.num_heads

    @property
    def packed(self):
        return self.in_proj_weight is not None

    @property
    def kdim(self):
        return self.embed_dim if self.packed else self.k_proj_weight.shape[1]

    @property
    def vdim(self):
        return self.embed_dim if self.packed else self.v_proj_weight.shape[1]


class _Static(NamedTuple):
    """Keys and values given already split into heads, (N * num_heads, S, head_dim) each, or None."""
    k: Optional[Var] = None
    v: Optional[Var] = None


def _check_shapes(p, query, key, value, seq):
    """Refuse feature sizes other than embed_dim / kdim / vdim, and key and value (or the
    batches) that do not line up; sequences along dim ``seq`` (0: (L, N, E), 1: (N, L, E))."""
    for name, v, want in (("query", query, p.embed_dim), ("key", key, p.kdim), ("value", value, p.vdim)):
        if v.shape[-1] != want:
            raise ValueError(f"{p.who}: {name}'s last dim must be {want}, got shape {v.shape}")
    if key.shape[:2] != value.shape[:2] or key.shape[1 - seq] != query.shape[1 - seq]:
        raise ValueError(f"{p.who}: key {key.shape} and value {value.shape} must have the same "
                         f"length, and the batch of query {query.shape}")


def _check_static(p, static, n, key, seq):
    """``static``'s Vars (N * num_heads, S, head_dim) as (N, heads, S, head_dim), and S: the
    sources' length, which is ``key``'s (along ``seq``) where no ``static.k`` is given."""
    for name, v in zip(("static_k", "static_v"), static):
        if v is not None:
            _float_var(name, v, (3,), p.who)
    if static.k is not None and p.bias_k is not None or static.v is not None and p.bias_v is not None:
        raise ValueError(f"{p.who}: bias_k and bias_v cannot be added to a static_k or static_v")
    src = key.shape[seq] if static.k is None else static.k.shape[1]
    heads = []
    for name, v in zip(("static_k", "static_v"), static):
        if v is not None:
            if v.shape != (n * p.num_heads, src, p.head_dim):
                raise ValueError(f"{p.who}: {name} must have shape ({n * p.num_heads}, {src}, {p.head_dim}) "
                                 f"(batch * num_heads, source length, head_dim), got {v.shape}")
            v = v.reshape(n, p.num_heads, src, p.head_dim)
        heads.append(v)
    if (static.k is None) != (static.v is None) and key.shape[seq] != src:
        raise ValueError(f"{p.who}: the keys and values must be as long: static_k's {src}, "
                         f"value's {key.shape[seq]}")
    return _Static(*heads), src


def _masks(p, key_padding_mask, attn_mask, query, src, batched, seq):
    """Both masks as additive float Vars shaped to broadcast against the (N, heads, L, S)
    scores: (1 or N * heads, L, S) and (N, 1, 1, S) (or None), checked against the inputs."""
    tgt, n, heads = query.shape[seq], query.shape[1 - seq], p.num_heads
    heads_shape = (n * heads, tgt, src) if batched else (heads, tgt, src)
    attn = _additive_mask("attn_mask", attn_mask, [(tgt, src), heads_shape], query.dtype, p.who)
    padding = _additive_mask("key_padding_mask", key_padding_mask, [(n, src) if batched else (src,)],
                             query.dtype, p.who)
    attn = None if attn is None else attn.reshape((-1, tgt, src))
    padding = None if padding is None else padding.reshape(n, 1, 1, src)
    return attn, padding


def _project(p, query, key, value):
    """The query, key and value projections, each in its input's layout with embed_dim features."""
    e, b = p.embed_dim, p.in_proj_bias
    if p.packed and query is key and key is value:
        # self-attention: one (rows, 3 * embed_dim) product, as PyTorch's packed in-projection;
        # three products of a third each, and their gradients, were 6 more products a layer
        qkv = F.linear(query, p.in_proj_weight, b)
        return [qkv[..., k * e:(k + 1) * e] for k in range(3)]
    if p.packed:
        weights = [p.in_proj_weight[k * e:(k + 1) * e] for k in range(3)]
    else:
        weights = [p.q_proj_weight, p.k_proj_weight, p.v_proj_weight]
    biases = [None] * 3 if b is None else [b[k * e:(k + 1) * e] for k in range(3)]
    return [F.linear(x, w, bias) for x, w, bias in zip((query, key, value), weights, biases)]


def _extend_keys(p, k, v, seq):
    """``bias_k``/``bias_v`` appended to every sequence (along dim ``seq``)."""
    if p.bias_k is None:
        return k, v
    shape = [k.shape[1 - seq]] * 2 + [p.embed_dim]
    shape[seq] = 1
    return (concat([k, p.bias_k.broadcast_to(tuple(shape)).cast(k.dtype)], dim=seq),
            concat([v, p.bias_v.broadcast_to(tuple(shape)).cast(v.dtype)], dim=seq))


def _pad_masks(attn, padding, added):
    """A 0 (attended) column in each mask for each of ``added`` keys appended."""
    if not added:
        return attn, padding
    return (None if attn is None else attn.pad((0, added)),
            None if padding is None else padding.pad((0, added)))


def _packs(p, query, key, value, attn_mask, padding):
    """Whether the attention runs as ``packed_self_attention``'s kernels: self-attention with
    the packed projection, no extra keys, dropout or padding mask, and a bool (L, S) mask or
    none (its additive form needs no gradient)."""
    return (p.packed and query is key and key is value and p.bias_k is None and not p.add_zero_attn
            and padding is None and p.dropout == 0
            and (attn_mask is None or (attn_mask.dtype == "bool" and attn_mask.ndim == 2)))


def _attend_packed(p, x, attn, seq):
    """Self-attention of ``x`` through one packed projection and the fused attention
    kernels (ops/self_attention.py; composed there where they do not apply): 3 graph nodes
    in place of ~40."""
    qkv = F.linear(x, p.in_proj_weight, p.in_proj_bias)
    bias = None if attn is None else attn.reshape(attn.shape[1:])
    out = packed_self_attention(qkv, p.num_heads, seq, 1.0 / math.sqrt(p.head_dim), bias)
    return p.out_proj(out.reshape(-1, p.embed_dim)).reshape(out.shape)


def _heads(p, x, seq):
    """A projection with sequences along dim ``seq`` -> (N, heads, length, head_dim), a view."""
    x = x.reshape(x.shape[0], x.shape[1], p.num_heads, p.head_dim)
    return x.permute(1, 2, 0, 3) if seq == 0 else x.permute(0, 2, 1, 3)


def _zero_attn(p, k, v):
    """(add_zero_attn) a zero key and value appended to every (N, heads, S, head_dim) sequence."""
    if not p.add_zero_attn:
        return k, v
    return (concat([k, zeros(k.shape[:2] + (1, k.shape[3]), dtype=k.dtype)], dim=2),
            concat([v, zeros(v.shape[:2] + (1, v.shape[3]), dtype=v.dtype)], dim=2))


def _attend(p, query, key, value, key_padding_mask, attn_mask, need_weights, average, batched, seq, static):
    """Attention of ``query`` (L, N, E) over ``key``/``value`` (S, N, kdim/vdim), or all
    (N, length, features) with ``seq`` 1: the output in that layout, and the weights (N, L, S),
    or (N, heads, L, S) unless ``average``, or None."""
    _check_shapes(p, query, key, value, seq)
    tgt, n, e, heads = query.shape[seq], query.shape[1 - seq], p.embed_dim, p.num_heads
    static, src = _check_static(p, static, n, key, seq)
    attn, padding = _masks(p, key_padding_mask, attn_mask, query, src, batched, seq)
    if not need_weights and static.k is None and static.v is None and _packs(p, query, key, value, attn_mask, padding):
        return _attend_packed(p, query, attn, seq), None
    q, k, v = _project(p, query, key, value)
    k, v = _extend_keys(p, k, v, seq)
    q = _heads(p, q, seq)
    k = _heads(p, k, seq) if static.k is None else static.k
    v = _heads(p, v, seq) if static.v is None else static.v
    k, v = _zero_attn(p, k, v)
    attn, padding = _pad_masks(attn, padding, int(p.bias_k is not None) + int(p.add_zero_attn))
    scores = (q * (1.0 / math.sqrt(p.head_dim))) @ k.transpose(2, 3)      # (N, heads, L, S)
    if padding is not None:
        scores = scores + padding
    if attn is not None and attn.shape[0] != 1:
        scores, attn = scores + attn.reshape(n, heads, tgt, -1), None
    # a mask shared by every head and sequence is added inside the softmax kernel
    bias = None if attn is None else attn.reshape(attn.shape[1:])
    weights = F.dropout(softmax_last(scores, bias), p.dropout, p.dropout > 0)
    out = (weights @ v).permute((2, 0, 1, 3) if seq == 0 else (0, 2, 1, 3))
    out = p.out_proj(out.reshape(tgt * n, e))
    out = out.reshape((tgt, n, e) if seq == 0 else (n, tgt, e))
    if not need_weights:
        return out, None
    return out, (weights.mean(dims=1) if average else weights)


def _forward(p, query, key, value, key_padding_mask, need_weights, attn_mask, average, is_causal, seq,
             static=_Static()):
    """The layer's and the function's attention: inputs checked, one sequence (2 dims) run as a
    batch of one; sequences along dim ``seq`` of 3-dim inputs."""
    query = _float_var("query", query, (2, 3), p.who)
    key, value = _float_var("key", key, (query.ndim,), p.who), _float_var("value", value, (query.ndim,), p.who)
    if is_causal and attn_mask is None:
        raise ValueError(f"{p.who}: is_causal is a hint that attn_mask is causal; pass the "
                         "causal attn_mask itself (e.g. jt.ones(L, L).triu(1) > 0)")
    if query.ndim == 2:      # one sequence: a batch of one, in the (L, N, E) layout
        out, weights = _attend(p, query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1), key_padding_mask,
                               attn_mask, need_weights, average, False, 0, static)
        return out.squeeze(1), (None if weights is None else weights.squeeze(0))
    # attended in the layout given: transposing (N, L, E) inputs first made each projection
    # gather its input, and the output be transposed back
    return _attend(p, query, key, value, key_padding_mask, attn_mask, need_weights, average, True, seq, static)


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

    def _attention(self):
        """This layer's weights as ``_attention``'s record (read at each call: a user may swap them)."""
        packed = self._qkv_same_embed_dim
        separate = [None] * 3 if packed else [self.q_proj_weight, self.k_proj_weight, self.v_proj_weight]
        return _Attention("MultiheadAttention", self.embed_dim, self.num_heads,
                          self.in_proj_weight if packed else None, self.in_proj_bias, *separate,
                          self.bias_k, self.bias_v, self.add_zero_attn, self.dropout if self.is_train else 0.0,
                          self.out_proj)

    def execute(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        return _forward(self._attention(), query, key, value, key_padding_mask, need_weights, attn_mask,
                        average_attn_weights, is_causal, 1 if self.batch_first else 0)


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """PyTorch's and Jittor's functional multi-head attention: what ``MultiheadAttention``
    computes, with its weights passed in. Sequences are (L, N, E), or (L, E) for one;
    ``in_proj_weight`` (3E, E) is packed, or with ``use_separate_proj_weight`` the three
    ``q/k/v_proj_weight`` are used. ``static_k``/``static_v`` (N * num_heads, S, E / num_heads)
    replace the projected keys/values. Returns ``(output, weights)`` as the layer does.

    >>> e, x = 8, jt.randn(3, 2, 8)
    >>> w, b = jt.randn(3 * e, e) * 0.3, jt.zeros(3 * e)
    >>> out, weights = multi_head_attention_forward(x, x, x, e, 2, w, b, None, None, False, 0.0,
    ...                                             jt.randn(e, e) * 0.3, jt.zeros(e))
    >>> out.shape, weights.shape
    ((3, 2, 8), (2, 3, 3))
    """
    who = "multi_head_attention_forward"
    query = _float_var("query", query, (2, 3), who)
    e, heads = query.shape[-1], count(who, "num_heads", num_heads)
    if e != embed_dim_to_check:
        raise ValueError(f"{who}: query's last dim ({e}) must be embed_dim_to_check ({embed_dim_to_check})")
    if e % heads:
        raise ValueError(f"{who}: embed_dim ({e}) must be divisible by num_heads ({heads})")
    separate = [q_proj_weight, k_proj_weight, v_proj_weight]
    if use_separate_proj_weight:
        for name, w in zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), separate):
            _float_var(name, w, (2,), who)
        in_proj_weight = None
    else:
        _float_var("in_proj_weight", in_proj_weight, (2,), who)
        separate = [None] * 3
    dropout = real(who, "dropout_p", dropout_p) if training else 0.0
    p = _Attention(who, e, heads, in_proj_weight, in_proj_bias, *separate, bias_k, bias_v, bool(add_zero_attn),
                   dropout, lambda rows: F.linear(rows, out_proj_weight, out_proj_bias))
    return _forward(p, query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights,
                    is_causal, 0, _Static(static_k, static_v))
