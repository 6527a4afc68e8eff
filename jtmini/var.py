"""``Var``: a node of the lazy graph, and the handle users hold.

A Var is either a leaf holding a (read-only) numpy buffer, or the result of an op on other Vars,
computed only when a value is asked for (``.numpy()``, ``.data``, ``.item()``, ``.sync()``).

    >>> import jtmini as jt
    >>> x = jt.array([[1.0, 2.0], [3.0, 4.0]])
    >>> y = (x * 2 + 1).sum(dims=1)          # nothing has run yet
    >>> y.numpy()                            # fuses, compiles (once, cached on disk), runs
    array([ 7., 15.], dtype=float32)

Vars are values: ``assign``/``update``/``__setitem__`` rebind the handle to a new value, and any
node already built from the old value keeps seeing the old value. An op that would leave its
argument as it is (a cast to its own dtype, a reshape to its own shape, a collective outside
mpirun) returns the argument's handle itself, as Jittor and PyTorch do, so an in-place op on the
result rebinds the argument too:

    >>> y = x.float32()          # x is float32 already: y is x
    >>> y += 1                   # x is incremented as well; write y = x + 1 for a new Var
"""
import itertools
import math
import sys
import weakref

import numpy as np

from . import dtypes
from .flags import flags
from .ops.registry import OPS, METHODS
from .state import services

_NAMED = dtypes.NAMED      # a Var's dtype is the NanoString of its name (Jittor's x.dtype.is_float())

_ids = itertools.count()
# id -> weak reference to an unrealized node, for pending_roots(). Keyed by id because Var.__eq__
# builds a node. Plain references with no callback (a WeakValueDictionary costs a third of a Var's
# creation, and a callback when it dies); the dead ones are swept as the table doubles.
_pending = {}
_sweep_at = 1024
# id -> weak reference to a Var rebound to a pending node (``p -= g * lr``): see history.py
rebound = {}


def _link(inputs, consumer):
    """Record the weak reference ``consumer`` among each input's consumers, dropping dead ones
    when a list doubles. One call per node, not per input: ~250 nodes a step of a small model."""
    for inp in inputs:
        consumers = inp._consumers
        if len(consumers) >= 32 and len(consumers) & (len(consumers) - 1) == 0:
            consumers[:] = [r for r in consumers if r() is not None]
        consumers.append(consumer)


def _track(v, ref=None):
    global _sweep_at
    _pending[id(v)] = weakref.ref(v) if ref is None else ref
    if len(_pending) >= _sweep_at:
        for key in [key for key, ref in _pending.items() if ref() is None]:
            del _pending[key]
        _sweep_at = max(1024, 2 * len(_pending))


def untrack(v):
    """Leave the unrealized ``v`` out of ``pending_roots`` (a constant shared by many graphs has
    nothing to compute and must not keep being realized); returns ``v``."""
    _pending.pop(id(v), None)
    return v


# id -> the host array a Var's ``.data`` handed out (its own, writable buffer), so a view computed
# from it is copied rather than kept (``Var._set_value``): a later write must not reach that view.
_exposed = weakref.WeakValueDictionary()


def _exposed_base(array):
    """The writable buffer handed out by ``.data`` that ``array`` is a view of, or None."""
    base = array
    while getattr(base, "base", None) is not None:      # as_strided's views hold a DummyArray
        base = base.base
    if base is array or not isinstance(base, np.ndarray) or not base.flags.writeable:
        return None
    return base if _exposed.get(id(base)) is base else None


class _Holder:
    """What an array from ``.data`` is a view of: the Var's buffer and the Var itself, so the Var
    lives as long as the array does, as in Jittor (the Var holds the array only weakly: no cycle)."""
    __slots__ = ("base", "var", "__array_interface__")

    def __init__(self, buffer, var):
        self.base, self.var = buffer, var
        self.__array_interface__ = buffer.__array_interface__


class _ScalarData(np.ndarray):
    """``.data`` of a 0-d Var: Jittor's 1-element array (``x.sum().data[0]``), sharing the Var's
    memory, that still converts with ``float()``/``int()``, which numpy >= 2.4 refuses for any
    array that is not 0-d."""

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __complex__(self):
        return complex(self.item())

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        # results are plain arrays; an ``out=`` of this class writes the same memory
        inputs = tuple(_plain(x) for x in inputs)
        if out is not None:
            kwargs["out"] = tuple(_plain(x) for x in out)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return func(*(_plain(x) for x in args), **{k: _plain(v) for k, v in kwargs.items()})

    def __repr__(self):
        return repr(self.view(np.ndarray))

    def __reduce__(self):
        return self.view(np.ndarray).__reduce__()     # pickles as a plain array


class _ScalarNumpy(_ScalarData):
    """``.numpy()`` of a 0-d Var: a 0-d array, as numpy's and PyTorch's, that also takes Jittor's
    ``[0]`` (Jittor has no 0-d Vars, so its code reads a scalar's value as ``x.numpy()[0]``)."""

    def __getitem__(self, index):
        if self.ndim == 0 and isinstance(index, (int, np.integer)) and not isinstance(index, bool) \
                and index in (0, -1):
            return self.view(np.ndarray)[()]
        return self.view(np.ndarray)[index]


def _plain(x):
    """``x`` as a plain ndarray view where it is a ``_ScalarData``, inside lists and tuples too
    (``np.stack([a.data, b.data])``: left as they were, numpy called back here without end)."""
    if isinstance(x, _ScalarData):
        return x.view(np.ndarray)
    if type(x) in (list, tuple):
        return type(x)(_plain(v) for v in x)
    return x


class Shape(tuple):
    """A Var's shape: a tuple (numpy-style code indexes, unpacks and hashes it) that also compares
    equal to the list Jittor's ``Var.shape`` is, so ``x.shape == [2, 3]`` holds as in Jittor.
    Jittor has no 0-d Vars (a full reduction, a dot product of vectors, is shaped [1]), so a 0-d
    shape also equals the list ``[1]``, as its ``.data`` is a 1-element array.

        >>> jt.zeros(2, 3).shape == [2, 3] == list(jt.zeros(2, 3).shape)
        True
        >>> jt.zeros(3).sum().shape == [1], jt.zeros(3).sum().shape == (1,)
        (True, False)
    """
    __slots__ = ()
    __hash__ = tuple.__hash__

    def __eq__(self, other):
        if type(other) is list:
            return tuple.__eq__(self, tuple(other)) or (not self and other == [1])
        return tuple.__eq__(self, other)

    def __ne__(self, other):
        return not self == other


# One Shape object per distinct shape (the plain tuple is the key: a Shape key would compare in
# Python). Vars of one shape share it, so comparing two graphs' signatures (replay.py), where
# every row holds a shape, finds them identical by identity instead of calling Shape.__eq__.
_shapes = {}
_SHAPES_MAX = 8192


def _shape_of(shape):
    """The shared ``Shape`` equal to ``shape`` (a tuple, list or Shape of ints)."""
    if type(shape) is Shape:
        return shape
    try:
        found = _shapes.get(shape)
    except TypeError:                   # a list, a generator: not a key
        shape = tuple(shape)
        found = _shapes.get(shape)
    if found is None:
        if len(_shapes) >= _SHAPES_MAX:
            _shapes.clear()
        found = Shape(shape)
        _shapes[tuple.__new__(tuple, found)] = found
    return found


class Var:
    __slots__ = ("op", "inputs", "attrs", "shape", "dtype", "_data", "_stop_grad", "_backward", "_consumers",
                 "id", "_name", "_version", "_view", "_handed", "__weakref__",
                 "__dict__")    # attributes of the user's own (``v.is_param = True``), as in Jittor
    __hash__ = object.__hash__       # __eq__ builds a node, identity stays the hash
    # numpy's operators defer to ours: np.float32(0.5) * x and array * x are Vars (as in PyTorch),
    # not a numpy array computed then and there, off the graph (ufuncs still convert: np.exp(x))
    __array_priority__ = 1000

    def __getattr__(self, name):
        """Called only for a missing attribute. Jittor gives every Var method an in-place twin,
        ``x.masked_fill_(m, 0)`` being ``x.assign(x.masked_fill(m, 0))``: a method without a
        ``name_`` of its own has this one (made on use: the nn methods come later, on import)."""
        found = getattr(type(self), name, None)
        if isinstance(found, property):     # its getter raised AttributeError: that one, with its advice
            return found.fget(self)
        if name.endswith("_") and not name.startswith("_"):
            method = getattr(type(self), name[:-1], None)
            if callable(method):
                return lambda *args, **kwargs: self.assign(method(self, *args, **kwargs))
        raise AttributeError(f"'Var' object has no attribute {name!r}", name=name, obj=self)

    def __init__(self, op, inputs=None, attrs=None, shape=None, dtype=None, data=None):
        if shape is None:           # jt.Var(data[, dtype]): a leaf holding a copy, as jt.array
            leaf = services.array(op, inputs if inputs is not None else dtype)
            op, inputs, attrs, shape, dtype, data = None, (), {}, leaf.shape, leaf.dtype, leaf._data
        # one statement per slot and _link/_track inlined: ~250 Vars a small model's step
        self.op = op
        self.inputs = inputs = tuple(inputs)
        self.attrs = attrs
        self.shape = shape if type(shape) is Shape else _shape_of(shape)
        self.dtype = _NAMED.get(dtype, dtype)
        self._data = data
        self._stop_grad = False
        self._consumers = []
        self._backward = None        # (inputs, rule) set by autograd.custom_grad
        self.id = next(_ids)
        self._name = ""
        self._version = 0
        self._view = None               # see _write_back
        self._handed = None             # a weak reference to the array .data handed out
        ref = weakref.ref(self)
        for inp in inputs:
            consumers = inp._consumers
            if len(consumers) >= 32:
                _link((inp,), ref)      # prunes the dead references when the list doubles
            else:
                consumers.append(ref)
        if data is None:
            _pending[id(self)] = ref
            if len(_pending) >= _sweep_at:
                _track(self, ref)       # sweeps the dead entries

    @staticmethod
    def node(op_name, inputs, **attrs):
        """Build a node of the registered op ``op_name``; shape and dtype are inferred (and
        checked) now, the value later."""
        shape, dtype = OPS[op_name].infer(inputs, attrs)
        v = Var(op_name, inputs, attrs, shape, dtype)      # a Var(...) call: tools/gen_stub.py proves the type
        if flags.no_grad:           # built under jt.no_grad(): no backward through it
            v._stop_grad = True
        if flags.profile_memory_enable:
            services.record_creation(v)
        if not flags.lazy_execution:     # eager mode, Jittor's lazy_execution=0: compute it now
            v.sync()
        return v

    # --- facts ---------------------------------------------------------------------------------
    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        """The number of dims, as ``ndim`` (Jittor's and PyTorch's method form)."""
        return len(self.shape)

    def numel(self):
        return math.prod(self.shape)      # np.prod costs ~5 us; the scheduler asks thousands of times a step

    def __len__(self):
        """The length of dim 0; 1 for a 0-d Var, Jittor's shape [1] (``len(x.sum())``)."""
        return self.shape[0] if self.shape else 1

    def __iter__(self):
        """The sub-Vars along dim 0 (as a numpy array iterates); a 0-d Var, Jittor's shape [1],
        gives itself once."""
        return (self[k] for k in range(len(self)))

    def is_realized(self):
        return self._data is not None

    def __repr__(self):
        """The value, computed if need be, as Jittor prints it (``print(loss)`` shows the number);
        a Var whose computation fails says so instead of raising from inside a debugger or a message.

            >>> jt.array([1, 2]) + 1
            jt.Var([2 3], shape=(2,), dtype=int32)
        """
        try:
            value = np.array2string(_host(self.sync()._data), threshold=20)
        except Exception as e:  # noqa: BLE001 -- repr must not raise; the error shows on fetch
            value = f"<not computed: {type(e).__name__}>"
        return f"jt.Var({value}, shape={self.shape}, dtype={self.dtype})"

    # --- values --------------------------------------------------------------------------------
    def sync(self, device_sync=False, weak_sync=True):
        """Compute this Var now (if it is not already); returns self. As in Jittor's
        ``x.sync(device_sync, weak_sync)``, ``device_sync`` also waits for queued GPU work;
        ``weak_sync`` steers Jittor's executor scheduling and has no counterpart here, so it is ignored.

        >>> y = (jt.array([1.0, 2.0]) * 2).sync(True)
        """
        if self._data is None:
            services.realize([self])
        cupy = sys.modules.get("cupy")      # loaded only if the CUDA backend ran something
        if device_sync and cupy is not None:
            cupy.cuda.Device().synchronize()
        return self

    def numpy(self):
        """A fresh, writable numpy copy of the value; of a 0-d Var a 0-d array that also takes
        Jittor's ``[0]`` (``loss.numpy()[0]``, ``x[i].numpy()[0]``: Jittor's scalars are shaped [1]).

            >>> v = jt.array([4, 5])[1].numpy()
            >>> v, v[0]
            (array(5, dtype=int32), np.int32(5))
        """
        out = np.array(_host(self.sync()._data), copy=True)
        return out.view(_ScalarNumpy) if out.ndim == 0 else out

    @property
    def data(self):
        """The value as a zero-copy numpy array; writes through it change this Var, as in Jittor
        (``a.data[0] = 5``, ``a.data += 1``, ``a.data[1:][0] = 2``): a plain ``np.ndarray``
        sharing this Var's memory.

            >>> a = jt.array([1, 2, 3])
            >>> a.data[1] = -2; a.data += 1; a.numpy()
            array([ 2, -1,  4], dtype=int32)

        The first ``.data`` gives the Var a writable copy of its own, so Vars that shared the
        old (read-only) buffer keep their value; later ones return that same array. A node built
        from this Var and computed after a write sees the write, as in Jittor. Once the Var is
        given another value (``assign``, ``x[i] = v``, an optimizer step), the array handed out
        turns read-only: read ``.data`` again. ``x[index].data`` for a basic index (ints, slices,
        None, ...) whose result is C-contiguous in x, x not rebound since, is a view into
        ``x.data``, so writes through it change x, as Jittor's shared memory does. A 0-d Var gives
        a 1-element array, as in Jittor (``correct.sum().data[0]``)."""
        buffer = self._own_buffer()
        handed = self._handed() if self._handed is not None else None
        if handed is None:
            handed = np.asarray(_Holder(buffer, self))
            handed = handed.reshape(1).view(_ScalarData) if buffer.ndim == 0 else handed
            self._handed = weakref.ref(handed)
        return handed

    @data.setter
    def data(self, value):
        # Jittor's ``v.data = array``: a new value in place, as ``assign`` (same shape, cast to dtype)
        if self._handed is not None and value is self._handed():
            return      # ``v.data += 1`` ends with ``v.data = <the array>``: the write is done already
        if not self.shape and not isinstance(value, Var) and np.size(value) == 1:
            value = np.reshape(value, ())       # a 0-d Var's .data is 1-element: take one back
        shape = tuple(np.shape(value)) if not isinstance(value, Var) else tuple(value.shape)
        if shape and shape != tuple(self.shape):
            raise ValueError(f"Var.data = value: the value has shape {shape}, the Var {tuple(self.shape)}; "
                             f"use assign() to give the Var a new shape")
        self.update(value)

    def _own_buffer(self):
        """This Var's value as a writable host array that is its own (what ``.data`` hands out)."""
        data = self.sync()._data
        if isinstance(data, np.ndarray) and data.flags.writeable:
            if data.base is None or _exposed_base(data) is not None:
                return data
            self._release_buffer()      # a view into x's buffer, and x was rebound since
        fresh = self._view_of_source_buffer()
        if fresh is None:
            host = _host(data)          # a GPU value's host copy is new already: no second copy
            fresh = np.array(host, copy=True if host is data else None, order="C")
            _exposed[id(fresh)] = fresh
        self._data, self._handed = fresh, None
        return fresh

    def _release_buffer(self):
        """Turn the buffer ``.data`` handed out (and the array itself) read-only: this Var is
        about to hold another, so later writes through it would reach no Var."""
        if isinstance(self._data, np.ndarray) and self._data.flags.writeable:
            self._data.flags.writeable = False
            handed = self._handed() if self._handed is not None else None
            if handed is not None:
                handed.flags.writeable = False
            self._handed = None

    def _view_of_source_buffer(self):
        """For ``x[index]`` with a basic index (ints, slices, None, ...) and x not rebound since:
        the C-contiguous view of x's own buffer it is, as Jittor shares that memory; else None."""
        if self._view is None or self._view[0]._version != self._view[2]:
            return None
        source, index, _ = self._view
        index = index if isinstance(index, tuple) else (index,)
        if not any(i is Ellipsis for i in index):
            index += (Ellipsis,)            # so that all-int indexes give a 0-d view, not a scalar
        # numpy's answer on a C-ordered array of the source's shape that reads no memory
        strides = [math.prod(source.shape[k + 1:]) for k in range(len(source.shape))]
        probe = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), source.shape, strides,
                                                writeable=False)[index]
        if probe.shape != self.shape or not probe.flags.c_contiguous:
            return None
        return source._own_buffer()[index]

    def _shareable_data(self):
        """This Var's computed buffer for another Var to hold too: a read-only copy where
        ``.data`` handed it out, so writes through that array reach this Var only."""
        data = self._data
        if isinstance(data, np.ndarray) and data.flags.writeable:
            data = data.copy()
            data.flags.writeable = False
        return data

    def _value(self):
        """The value as a host numpy array, read-only unless ``.data`` handed it out (jtmini's
        own reads use this, so they neither copy nor hand out the buffer)."""
        return _host(self.sync()._data)

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"item() needs a Var with one element, got shape {self.shape}")
        return _host(self.sync()._data).reshape(()).item()

    def __array__(self, dtype=None, copy=None):
        value = _host(self.sync()._data)
        return value.astype(dtype) if dtype is not None else value.copy()

    def __bool__(self):
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if not dtypes.is_integer(self.dtype):
            raise TypeError(f"only integer Vars can be used as an index, got {self.dtype}")
        return int(self.item())

    def name(self, new_name=None):
        """This Var's name (a label for debugging, "" unless given), or with ``new_name``, set
        it and return the Var, as in Jittor.

        >>> jt.array([1.0]).name("x").name()
        'x'
        """
        if new_name is None:
            return self._name
        if not isinstance(new_name, str):
            raise TypeError(f"name: a Var's name must be a str, got {type(new_name).__name__}")
        self._name = new_name
        return self

    @property
    def uncertain_shape(self):
        """Jittor's shape with unknown dims as negatives; every jtmini shape is known when the Var
        is built (``where`` with a condition alone runs eagerly), so this is the shape as a list."""
        return list(self.shape)

    # --- gradient control ----------------------------------------------------------------------
    def start_grad(self):
        """Let gradients flow through this Var again (undo ``stop_grad``, in place); returns self.

        >>> w = jt.array([1.0]).stop_grad().start_grad()     # w.requires_grad is True
        """
        self._stop_grad = False
        return self

    def stop_grad(self):
        """Block gradients through this Var (in place); returns self, as in Jittor."""
        self._stop_grad = True
        return self

    def is_stop_grad(self):
        """True when no gradient flows through this Var: ``stop_grad`` was called, or its dtype is
        not a float one (as in Jittor, where integer and bool Vars are always stop_grad, so an
        optimizer given a module's integer buffer leaves it alone)."""
        return self._stop_grad or not self.dtype.startswith("float")

    @property
    def requires_grad(self):
        return not self.is_stop_grad()

    @requires_grad.setter
    def requires_grad(self, value):
        self._stop_grad = not value

    def detach(self):
        """A new Var with the same value and no gradient history."""
        if self._data is not None:
            return Var(None, (), {}, self.shape, self.dtype, self._shareable_data())
        return Var.node("detach", [self])

    def __copy__(self):
        """``copy.copy(x)``: a new Var with x's value, computed now, and its ``requires_grad``, with
        no history (Jittor's). Copying the node instead would compute it again: a weight drawn
        lazily (``jt.randn``) got other numbers in ``copy.deepcopy(model)``."""
        return _leaf(self.numpy(), self._stop_grad)

    def __deepcopy__(self, memo):
        out = memo[id(self)] = self.__copy__()
        return out

    def __reduce__(self):
        """Pickled as its value and ``requires_grad`` (as ``copy``): a pickled node would be computed
        again when loaded, so a lazily drawn weight came back with other numbers."""
        return _leaf, (self.numpy(), self._stop_grad)

    # --- rebinding -----------------------------------------------------------------------------
    def assign(self, value):
        """Make this Var hold ``value``'s value, cast to this Var's dtype, as Jittor's ``assign``:
        gradients still flow through it to what ``value`` was computed from (``w.assign(b * 2)``,
        then a loss of ``w`` has a gradient for ``b``). A Var (or array) of another shape gives this
        Var its shape; a number fills this Var's shape. Returns self. ``update`` is the form with
        no gradient history, which optimizers use.

        >>> w.assign(lora_b.unsqueeze(-1))   # nodes built from the old w still see the old value
        """
        value = self._assigned(value)
        if value.op is None or value._stop_grad:     # no history to keep: a value, as update
            return self._take_value(value)
        # this handle becomes a node like value's, as ``x -= v`` makes it, so once computed it forgets
        # its history when no gradient can be asked through it (history.py); a window of value would
        # keep value, and every step's graph behind it, alive
        self._rebind(value)
        self.shape = value.shape
        return self

    def update(self, value):
        """Make this Var hold ``value``'s value, cast to this Var's dtype, with no gradient history:
        the parameter update of optimizers (Jittor's ``update``); otherwise as ``assign``.

        >>> w.update(w - lr * g)         # nodes built from the old w still see the old value
        """
        return self._take_value(self._assigned(value))

    def _take_value(self, value):
        """Hold ``value`` (a Var of this Var's dtype, ``_assigned``) with no history."""
        if value._data is not None:       # an optimizer's new value: computed already
            self._rebind(None, value._shareable_data())
        else:
            self._rebind(Var.node("detach", [value]))
        self.shape = value.shape
        return self

    def _assigned(self, value):
        """``value`` as a Var of the shape this Var takes (another shape for a Var or array, as
        Jittor's assign, so ``x.assign(x.transpose())`` transposes x; a number fills this Var's
        shape) and of this Var's dtype."""
        given = value
        value = services.as_var(value, like=self)
        shape = value.shape if isinstance(given, (Var, np.ndarray)) else self.shape
        if value.shape != shape:
            value = value.broadcast_to(shape)
        return value if value.dtype == self.dtype else value.cast(self.dtype)

    def opt_grad(self, optimizer):
        """This parameter's gradient in ``optimizer``'s step, between ``optimizer.backward(loss)``
        and ``optimizer.step()`` (summed over ranks, clipped), as in Jittor; ``assign`` or ``update``
        on it changes what the step applies (see ``Optimizer.opt_grad``).

        >>> optimizer.backward(loss); w.opt_grad(optimizer).update(w.opt_grad(optimizer) * 0.5)
        """
        # a Var here would call back into this method with the two swapped, for ever
        if isinstance(optimizer, Var) or not callable(getattr(type(optimizer), "opt_grad", None)):
            raise TypeError(f"opt_grad: expected the optimizer (jt.optim.Optimizer) whose step will apply the "
                            f"gradient, got {type(optimizer).__name__}")
        return optimizer.opt_grad(self)

    def _rebind(self, source, data=None):
        """Make this handle the node ``source`` (``None``: a leaf holding ``data``, one Var fewer
        for a value already computed) while every existing consumer keeps the old node.
        ``source`` may itself consume this handle (``x[0] = v`` builds ``where(mask, v, x)``): it is
        retargeted with the others BEFORE its inputs are copied, so the handle reads the old node
        and the graph has no cycle. Returns the old node; None where nothing could reach it (a
        computed handle given a new value, no live Var reading it: the optimizer's states)."""
        self._release_buffer()
        if source is None and data is not None and self._data is not None and not self._read_by_live_node():
            self.op, self.inputs, self.attrs, self._data, self._backward = None, (), {}, data, None
            self._consumers = []
            self._version += 1
            _pending.pop(id(self), None)
            return None
        old = Var(self.op, self.inputs, self.attrs, self.shape, self.dtype, self._data)
        old._stop_grad, old._backward = self._stop_grad, self._backward
        noted = rebound.get(id(self))
        # the previous update, still to be stored (the entry may be a dead Var's whose id this one
        # reuses: such a snapshot is not an update, and noting it made some steps plan anew)
        if old._data is None and noted is not None and noted() is self:
            rebound.pop(id(old), None)
            rebound[id(old)] = weakref.ref(old)
        if self._data is None and self.op is not None and OPS[self.op].kind == "collective":
            services.requeue_collective(self, old)
        _move_readers(self, old)
        if source is None:
            self.op, self.inputs, self.attrs, self._data, self._backward = None, (), {}, data, None
        else:
            self.op, self.inputs, self.attrs, self._data = source.op, source.inputs, source.attrs, source._data
            self._backward = source._backward
        self._consumers = []
        self._version += 1
        _link(self.inputs, weakref.ref(self))
        if self._data is None:
            _track(self)
            # computed at the next realize (history.py), in the order noted: re-inserted, not
            # overwritten in a dead Var's place, so a step's targets come in the same order each step
            rebound.pop(id(self), None)
            rebound[id(self)] = weakref.ref(self)
        else:
            _pending.pop(id(self), None)
        return old

    def _read_by_live_node(self):
        """Whether a live Var has this handle among its inputs (so a rebind must keep the old node)."""
        for ref in self._consumers:
            consumer = ref()
            if consumer is not None:
                for x in consumer.inputs:
                    if x is self:
                        return True
        return False

    def _write_back(self):
        """After a write to this Var (``self[i] = v``, ``self.data[i] = v``): if it is ``x[k]``
        for an int k and x has not been rebound since, write the new value into x as well, as
        Jittor's cascade setitem does, so ``a[1][2] = v`` changes ``a``. Only a single int index
        counts, as in Jittor: the result of any other index is a value of its own."""
        if self._view is None or not _is_int_index(self._view[1]):
            return
        source, k, version = self._view
        if source._version != version:      # the source holds another value now: no view of it
            self._view = None
            return
        source[k] = self                    # rebinds source, and writes back further up a chain
        self._view = (source, k, source._version)

    def _set_value(self, data):
        """Called by the executor with the computed buffer. A node no gradient flows through (a
        detached value, an updated parameter, a ``stop_grad`` statistic updated by ``+=`` every
        step) forgets its inputs, so history cannot pile up from step to step."""
        if isinstance(data, np.ndarray):     # a GPU buffer (cupy) has no read-only flag
            if _exposed_base(data) is not None:     # a view of what .data handed out: later
                data = data.copy()                  # writes through that must not reach it
            data.flags.writeable = False
        self._data = data
        _pending.pop(id(self), None)
        if self.op == "detach" or self._stop_grad:
            self.op, self.inputs, self.attrs, self._backward = None, (), {}, None


def overwritten(v):
    """After a step wrote a new value over ``v``'s buffer (``runtime/cpu_inplace.py``): the Vars
    that read ``v`` read a node that raises when computed (``ops/overwritten.py``) instead."""
    if v._read_by_live_node():
        old = made("overwritten", (), {"shape": v.shape, "dtype": v.dtype}, v.shape, v.dtype)
        _pending.pop(id(old), None)         # nothing computes it unless a graph reads it
        _move_readers(v, old)
    v._consumers = []


def _move_readers(v, old):
    """Make every live Var that reads ``v`` read ``old`` instead (``v``'s list is left to the caller)."""
    for ref in v._consumers:
        consumer = ref()
        if consumer is not None:
            consumer.inputs = tuple([old if x is v else x for x in consumer.inputs])
            old._consumers.append(ref)


def _host(data):
    """``data`` as a numpy array: a buffer on the GPU (a cupy array) is copied to the host."""
    if isinstance(data, np.ndarray):
        return data
    return services.to_host(data)


def keep_drawn(v, value):
    """Give the Var of a stateful op (random numbers) its value for good, as a leaf: computed
    again, say by a gradient realized later, it would draw other numbers. Returns its buffer."""
    v._set_value(value)
    v.op, v.attrs = None, {}
    return v._data


def _leaf(value, stop_grad):
    """A leaf Var holding the array ``value`` (a copy's, or a pickled Var's, see ``Var.__copy__``)."""
    out = Var(None, (), {}, _shape_of(value.shape), _NAMED[dtypes.numpy_name(value.dtype)], value)
    out._stop_grad = stop_grad
    return out


def pending_roots():
    """Unrealized Vars that no live Var consumes: realizing these computes everything pending.

    An unrealized input of a Var that has its value is not one: it was fused into that Var's
    kernel, and nothing is waiting for it. (Counting it made every optimizer step compute one more
    layer of a graph the user kept alive, such as a list of losses, until none was left.)"""
    roots, dead = [], []
    for key, ref in _pending.items():       # a plain loop: called every optimizer step on ~3000 Vars
        v = ref()
        if v is None:
            dead.append(key)
            continue
        if v._data is not None:
            continue
        for consumer in v._consumers:
            if consumer() is not None:
                break
        else:
            roots.append(v)
    for key in dead:
        del _pending[key]
    return sorted(roots, key=lambda v: v.id)


_object_new = object.__new__


def made(op, inputs, attrs, shape, dtype):
    """The pending node ``Var(op, inputs, attrs, shape, dtype)`` from parts already in form
    (``inputs`` a tuple, ``shape`` the shared ``Shape``, ``dtype`` named), without the class
    call and ``__init__``'s conversions: ~0.7 us less a Var, and a GAN step's gradient recipes
    make ~65 (``grad_recipe``). Sets every slot ``__init__`` sets."""
    v = _object_new(Var)
    v.op = op
    v.inputs = inputs
    v.attrs = attrs
    v.shape = shape
    v.dtype = dtype
    v._data = None
    v._stop_grad = False
    v._consumers = []
    v._backward = None
    v.id = next(_ids)
    v._name = ""
    v._version = 0
    v._view = None
    v._handed = None
    ref = weakref.ref(v)
    for inp in inputs:
        consumers = inp._consumers
        if len(consumers) >= 32:
            _link((inp,), ref)
        else:
            consumers.append(ref)
    _pending[id(v)] = ref
    if len(_pending) >= _sweep_at:
        _track(v, ref)
    return v


# Operators map onto exported functions; reflected forms swap the operands.
_OPERATORS = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "floordiv": "floordiv",
    "mod": "mod", "pow": "pow", "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or",
    "xor": "bitwise_xor", "lshift": "left_shift", "rshift": "right_shift",
}
_COMPARISONS = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                "gt": "greater", "ge": "greater_equal"}


def _forward(fn_name):
    return lambda self, other: METHODS[fn_name](self, other)


def _reflected(fn_name):
    return lambda self, other: METHODS[fn_name](other, self)


def _in_place(fn_name):
    """``a += b`` and the like, as in Jittor: the handle ``a`` becomes the result, with the
    result's shape and dtype (``jt.float16(0) += float32`` is float32, a (3,) Var plus a (2, 3) one
    is (2, 3)); a ``stop_grad`` handle stays one (Jittor's ``assign_var``), so state updated by
    ``+=`` keeps no history. Vars built from ``a`` earlier keep the old value."""
    def op(self, other):
        result = METHODS[fn_name](self, other)
        self._rebind(result)
        self.shape, self.dtype = result.shape, result.dtype
        self._stop_grad = self._stop_grad or result._stop_grad
        return self
    return op


def _is_float(dtype):
    return dtype.startswith("float")


def install_methods():
    """Attach every exported method and operator to Var (called once, when jtmini is imported)."""
    for name, fn in METHODS.items():
        if not hasattr(Var, name) or name in ("sum", "max", "min"):
            setattr(Var, name, fn)
    for dunder, fn_name in _OPERATORS.items():
        setattr(Var, f"__{dunder}__", _forward(fn_name))
        setattr(Var, f"__r{dunder}__", _reflected(fn_name))
        setattr(Var, f"__i{dunder}__", _in_place(fn_name))    # a @= b too, when the shape is kept
    for dunder, fn_name in _COMPARISONS.items():
        setattr(Var, f"__{dunder}__", _forward(fn_name))
    Var.__neg__ = lambda self: METHODS["neg"](self)
    Var.__abs__ = lambda self: METHODS["abs"](self)
    Var.__invert__ = lambda self: METHODS["bitwise_not"](self)
    Var.__pos__ = lambda self: self
    Var.__getitem__ = _getitem
    Var.__setitem__ = _setitem


def _getitem(self, index):
    """``x[index]``; a basic index (ints, slices, None, ...) remembers x, the index and x's version:
    for ``_write_back`` (an int index) and for ``.data`` (a view into x's buffer, as in Jittor).
    The reference to x is strong, as Jittor's graph edge is: in ``a[1][2] = v`` nothing else holds
    the temporary ``a[1]``."""
    result = METHODS["getitem"](self, index)
    if all(_is_int_index(i) or i is None or i is Ellipsis or type(i) is slice
           for i in (index if type(index) is tuple else (index,))):
        result._view = (self, index, self._version)
    return result


def _is_int_index(index):
    return isinstance(index, (int, np.integer)) and not isinstance(index, (bool, np.bool_))


def _setitem(self, index, value):
    self._rebind(METHODS["setitem"](self, index, value))
    self._write_back()
