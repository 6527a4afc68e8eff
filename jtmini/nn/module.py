"""``Module``: Jittor-style layers whose parameters are found by walking attributes.

A module's parameters are the Vars it holds as attributes, plus those of the modules it holds as
attributes. As in Jittor and PyTorch, Vars and modules inside plain lists, tuples and dicts are
not walked (they are not trained or saved): hold them in ``nn.ModuleList``, ``nn.Sequential``,
``nn.ModuleDict`` or ``nn.ParameterList``. Names are dotted attribute paths, as in PyTorch
(``layer1.0.conv1.weight``), so weights can be copied between the two by name. Attributes whose
name starts with ``_`` are private and not walked.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> class Net(jt.Module):
    ...     def __init__(self):
    ...         self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 2)
    ...     def execute(self, x):
    ...         return self.fc2(nn.relu(self.fc1(x)))
    >>> net = Net()
    >>> [name for name, _ in net.named_parameters()]
    ['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']
    >>> net.save("/tmp/net.pkl"); net.load("/tmp/net.pkl")
"""
import collections
import inspect
import numbers
import warnings

import numpy as np

from .. import dtypes, persist
from ..creation import array
from ..flags import flags
from ..gc_pause import paused
from ..ops.collective import broadcast_in_place
from ..ops.registry import keyword_aliases
from ..var import Var


_UNSET = object()      # extra_repr: an argument the module keeps no attribute of


class Module:
    """Base class of layers and models. Define ``execute`` (or ``forward``); call the module to run
    it. ``__init__`` need not call ``super().__init__()``, as in Jittor.

    ``is_train`` is True until ``eval()``; ``train()``/``eval()`` set it on every submodule.
    """

    is_train = True
    _entry_point = "execute"     # the method __call__ runs: see __init_subclass__

    def __init_subclass__(cls, **kwargs):
        # The most derived class that defines execute or forward decides which one a call runs:
        # a subclass of nn.Linear that overrides only forward must not get Linear.execute.
        # Found once per class, not per call (a ResNet step calls ~60 modules).
        super().__init_subclass__(**kwargs)
        for klass in cls.__mro__:
            defined = [m for m in ("execute", "forward") if m in vars(klass)]
            if defined:
                cls._entry_point = defined[0]
                return

    @paused        # a forward builds ~1000 Vars: the cyclic GC cost 1.5 ms of a ResNet-18 step here
    def __call__(self, *args, **kwargs):
        if "_hooks" in self.__dict__:          # only modules given a hook pay for hooks
            from .hooks import hooked_call
            return hooked_call(self, args, kwargs, lambda a, kw: getattr(self, self._entry_point)(*a, **kw))
        return getattr(self, self._entry_point)(*args, **kwargs)

    def execute(self, *args, **kwargs):
        if type(self).forward is Module.forward:
            raise NotImplementedError(f"{type(self).__name__} must define execute (or forward)")
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        return self.execute(*args, **kwargs)

    # --- walking -------------------------------------------------------------------------------
    def _attributes(self):
        # a Var recomputed from parameters before each forward (weight_norm's weight) is not one
        derived = self.__dict__.get("_derived", ())
        return ((k, v) for k, v in vars(self).items() if not k.startswith("_") and k not in derived)

    def named_children(self):
        """(name, module) for the modules held directly by this one."""
        return ((key, value) for key, value in self._attributes() if isinstance(value, Module))

    def children(self):
        return [m for _, m in self.named_children()]

    @property
    def _modules(self):
        """Jittor's dict of the modules held directly as attributes, in order: as in Jittor, not a
        Sequential's or ModuleList's layers (its ``_modules`` is empty: code that recurses through
        ``_modules`` stops there, as in Jittor). A container that keeps its modules in a
        ``_modules`` dict of its own (ModuleDict, PyTorch's) gives that."""
        if "_modules" in vars(self):
            return vars(self)["_modules"]
        return collections.OrderedDict((k, v) for k, v in vars(self).items()
                                       if not k.startswith("_") and isinstance(v, Module))

    @_modules.setter
    def _modules(self, value):
        vars(self)["_modules"] = value

    @property
    def _parameters(self):
        """Jittor's dict of the Vars held directly as attributes of this module, in order."""
        return collections.OrderedDict((k, v) for k, v in self._attributes() if isinstance(v, Var))

    def __getattr__(self, name):
        """Called only for a missing attribute (AttributeError naming it); defined so that
        ``module.__getattr__(name)`` reads an attribute, as in Jittor."""
        return object.__getattribute__(self, name)

    def named_modules(self, prefix=""):
        """(dotted name, module) for this module ("") and every submodule, each once."""
        seen, stack = set(), [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = list(module.named_children())
            stack.extend((f"{name}.{k}" if name else k, m) for k, m in reversed(children))

    def modules(self):
        return [m for _, m in self.named_modules()]

    def dfs(self, parents, k, callback, callback_leave=None, recurse=True):
        """Jittor's walk of the module tree: ``callback(parents, name, module, n_children)`` on
        this module, then (unless it returned False, or ``recurse`` is False) on each child with
        this module appended to ``parents``, then ``callback_leave`` with the same arguments.

            >>> names = []
            >>> model.dfs([], None, lambda parents, k, m, n: names.append(k))
        """
        children = list(self.named_children())
        if callback(parents, k, self, len(children)) is False:
            return
        if recurse:
            parents.append(self)
            for name, child in children:
                child.dfs(parents, name, callback, callback_leave)
            parents.pop()
        if callback_leave:
            callback_leave(parents, k, self, len(children))

    def _get_name(self):
        return type(self).__name__

    def extra_repr(self):
        """What ``repr`` shows inside the parentheses after the class name (PyTorch's and
        Jittor's hook): by default, as Jittor's, the constructor's arguments the module keeps
        under the same names, where they are numbers, strings or tuples.

            >>> nn.Linear(2, 3).extra_repr()
            'in_features=2, out_features=3'
        """
        try:
            params = inspect.signature(type(self).__init__).parameters.values()
        except (TypeError, ValueError):
            return ""
        shown = []
        for p in params:
            value = self.__dict__.get(p.name, _UNSET)
            if p.name == "inplace" and value is False:      # PyTorch's ``inplace`` shows only when set
                continue
            if p.name != "self" and isinstance(value, (bool, numbers.Number, str, tuple)):
                shown.append(f"{p.name}={value!r}")
        return ", ".join(shown)

    def __repr__(self):
        """The module tree as PyTorch prints it, one child a line:
        ``Sequential(\n  (0): Linear(in_features=2, out_features=3)\n)``."""
        extra, children = self.extra_repr(), list(self.named_children())
        if not children:
            return f"{type(self).__name__}({extra})"
        lines = ([extra] if extra else []) + [f"({name}): {child!r}" for name, child in children]
        return f"{type(self).__name__}(\n  " + "\n".join(lines).replace("\n", "\n  ") + "\n)"

    def named_parameters(self, recurse=True):
        """(dotted name, Var) for every Var held by this module tree (this module's own only,
        with ``recurse=False``), each Var once. As in Jittor this includes non-trainable state
        such as BatchNorm's running statistics (which are ``stop_grad``); optimizers skip those.
        As Jittor's, it names each Var by its path where it has no longer name (``p.name()``)."""
        seen, out = set(), []
        for prefix, module in self.named_modules() if recurse else [("", self)]:
            for key, var in module._attributes():
                if isinstance(var, Var) and id(var) not in seen:
                    seen.add(id(var))
                    name = f"{prefix}.{key}" if prefix else key
                    if len(name) > len(var._name):
                        var._name = name
                    out.append((name, var))
        return out

    def parameters(self, recurse=True):
        """Every Var of the module tree (see ``named_parameters``), in a stable order."""
        return [var for _, var in self.named_parameters(recurse)]

    def add_module(self, name, module):
        """Hold ``module`` as attribute ``name`` (PyTorch's and Jittor's); returns self."""
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"add_module: the name must be a non-empty string without '.', got {name!r}")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module or None, got {type(module).__name__}")
        setattr(self, name, module)
        return self

    @keyword_aliases(key="name")             # Jittor's name
    def register_buffer(self, name, value, persistent=True):
        """Hold ``value`` (a Var or array) as attribute ``name``; ``persistent=False`` keeps it out
        of ``state_dict``. Returns it. As in Jittor, a buffer is a Var like any other: an optimizer
        trains a float one unless it is ``stop_grad`` (call ``.stop_grad()`` for fixed state).

            >>> self.register_buffer("mask", jt.ones(8, 8).tril(), persistent=False)
        """
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"register_buffer: the name must be a non-empty string without '.', got {name!r}")
        if value is not None:
            value = value if isinstance(value, Var) else array(value)
            value.persistent = bool(persistent)
        setattr(self, name, value)
        return value

    def named_buffers(self, recurse=True):
        """(dotted name, Var) for every Var of the tree (of this module, with ``recurse=False``)
        registered with ``register_buffer`` or not trained (``stop_grad``: BatchNorm statistics)."""
        return [(name, v) for name, v in self.named_parameters(recurse)
                if v.is_stop_grad() or getattr(v, "persistent", None) is not None]

    def buffers(self, recurse=True):
        return [v for _, v in self.named_buffers(recurse)]

    @property
    def training(self):
        """PyTorch's name of ``is_train``."""
        return self.is_train

    @training.setter
    def training(self, value):
        self.is_train = bool(value)

    def is_training(self):
        return self.is_train

    def cuda(self, device=None):
        """As Jittor's: turn on ``jt.flags.use_cuda`` (where no GPU can be used it warns and stays off)."""
        flags.use_cuda = 1
        return self

    @keyword_aliases(func="fn")              # Jittor's name
    def apply(self, fn):
        """Call ``fn(module)`` on every module of the tree; returns self."""
        for module in self.modules():
            fn(module)
        return self

    # --- hooks ---------------------------------------------------------------------------------
    @keyword_aliases(func="hook")            # Jittor's name
    def register_forward_hook(self, hook):
        """Call ``hook(module, args, output)`` after each forward (``hook(module, args, output,
        kwargs)`` when keywords were given, as Jittor); a returned value replaces the output.
        Returns a handle whose ``remove()`` takes the hook off.

            >>> handle = model.register_forward_hook(lambda m, args, out: print(out.shape))
        """
        from .hooks import add_hook
        return add_hook(self, "forward", hook)

    @keyword_aliases(func="hook")
    def register_pre_forward_hook(self, hook):
        """Call ``hook(module, args)`` (``hook(module, args, kwargs)`` when keywords are given)
        before each forward; a returned ``(args, kwargs)`` pair (Jittor's form) replaces both, any
        other returned tuple (or single value) the arguments (PyTorch's)."""
        from .hooks import add_hook
        return add_hook(self, "pre", hook)

    register_forward_pre_hook = register_pre_forward_hook

    @keyword_aliases(func="hook")
    def register_backward_hook(self, hook):
        """Call ``hook(module, grad_input, grad_output)`` (tuples of Vars) when the gradient of
        the module's input is computed; a returned tuple replaces ``grad_input``. The module must
        take one Var and return one Var.

            >>> relu.register_backward_hook(lambda m, gin, gout: (gin[0] * 2,))
        """
        from .hooks import add_hook
        return add_hook(self, "backward", hook)

    def register_input_backward_hook(self, hook):
        """Jittor's: call ``hook(grad_input)`` (a 1-tuple: the gradient of the module's one Var
        argument) when it is computed; a returned tuple replaces it.

            >>> layer.register_input_backward_hook(lambda grads: (grads[0].clamp(-1, 1),))
        """
        from .hooks import add_hook
        return add_hook(self, "input_backward", hook)

    def register_output_backward_hook(self, hook):
        """Jittor's: call ``hook(grad_output)`` (a 1-tuple: the gradient reaching the module's
        one Var result) before it flows into the module; a returned tuple replaces it."""
        from .hooks import add_hook
        return add_hook(self, "output_backward", hook)

    def remove_forward_hook(self):
        """Take off every forward hook (Jittor's; a handle's ``remove()`` takes off one)."""
        from .hooks import remove_hooks
        remove_hooks(self, "forward")

    def remove_pre_forward_hook(self):
        """Take off every pre-forward hook."""
        from .hooks import remove_hooks
        remove_hooks(self, "pre")

    def remove_input_backward_hook(self):
        from .hooks import remove_hooks
        remove_hooks(self, "input_backward")

    def remove_output_backward_hook(self):
        from .hooks import remove_hooks
        remove_hooks(self, "output_backward")

    def remove_backward_hook(self):
        """Take off every backward hook, Jittor's input and output ones included."""
        from .hooks import remove_hooks
        remove_hooks(self, "backward", "input_backward", "output_backward")

    def requires_grad_(self, requires_grad=True):
        """With False, calls of this module record no gradient (as under ``jt.no_grad``): nothing
        flows back through it to its input or parameters, until ``requires_grad_(True)``."""
        from .hooks import hook_table
        hook_table(self)["grad"] = bool(requires_grad)
        return self

    # --- modes ---------------------------------------------------------------------------------
    def train(self):
        """Training mode for the whole tree (BatchNorm uses batch statistics, Dropout drops)."""
        for module in self.modules():
            module.is_train = True
        return self

    def eval(self):
        """Inference mode for the whole tree (BatchNorm uses running statistics)."""
        for module in self.modules():
            module.is_train = False
        return self

    # --- parameter dtypes ---------------------------------------------------------------------
    def float16(self):
        """Every float parameter of the tree converted to float16 in place (the same Var objects,
        now float16), as Jittor's ``Module.float16``; returns self. Layers without a half path
        (BatchNorm, LayerNorm, softmax) then refuse float16 input.

        >>> jt.nn.Linear(4, 2).half().weight.dtype
        'float16'
        """
        return self._cast_parameters("float16")

    half = float16

    def float32(self):
        """Every float parameter converted to float32 in place; returns self."""
        return self._cast_parameters("float32")

    def float64(self):
        """Every float parameter converted to float64 in place; returns self."""
        return self._cast_parameters("float64")

    def float_auto(self):
        """Every float parameter converted to float16 when ``jt.flags.amp_reg`` prefers float16,
        else to float32, as Jittor's (and ``Var.float_auto``); returns self."""
        return self._cast_parameters("float16" if flags.amp_reg & dtypes.AMP_PREFER16 else "float32")

    def _cast_parameters(self, dtype):
        for p in self.parameters():
            if dtypes.is_float(p.dtype) and p.dtype != dtype:
                value = p.cast(dtype).detach()
                value.sync()
                p._rebind(None, value._data)       # consumers built so far keep the old value
                p.dtype = dtype
        return self

    # --- state ---------------------------------------------------------------------------------
    def state_dict(self, to=None, recurse=True):
        """An ordered dict of dotted name -> Var for every Var of the tree (of this module, with
        ``recurse=False``): the module's own Vars, as Jittor's, so the dict follows later
        updates. ``to="numpy"`` gives numpy copies, ``to="torch"`` PyTorch tensors (Jittor's:
        ``torch_model.load_state_dict(model.state_dict(to="torch"))``).

            >>> {k: v.shape for k, v in nn.Linear(2, 3).state_dict().items()}
            {'weight': (3, 2), 'bias': (3,)}
        """
        if to not in (None, "numpy", "torch"):
            raise ValueError(f"state_dict: to must be None, 'numpy' or 'torch', got {to!r}")
        if to == "torch":
            import torch
        convert = {None: lambda v: v, "numpy": lambda v: v.numpy().copy(),
                   "torch": lambda v: torch.from_numpy(v.numpy().copy())}[to]
        return collections.OrderedDict((name, convert(var)) for name, var in self._persistent(recurse))

    def _persistent(self, recurse=True):
        """named_parameters without the buffers registered with ``persistent=False``."""
        return [(n, v) for n, v in self.named_parameters(recurse) if getattr(v, "persistent", True)]

    @keyword_aliases(params="state", state_dict="state")       # Jittor's and PyTorch's names
    def load_state_dict(self, state, strict=False):
        """Give each Var the value stored under its name. As Jittor's, this is ``load_parameters``:
        entries that do not fit are skipped with one warning, Vars without an entry keep their
        values. ``strict=True`` is PyTorch's check: names missing on either side raise KeyError
        (PyTorch's BatchNorm counters, ``num_batches_tracked``, aside) and a value that does not
        fit a ValueError, before any Var changes. Shapes must match; a value of another dtype of
        the same kind is cast to the Var's dtype (float64 -> float32, int64 -> int32; also int ->
        float), any other dtype (float -> int, strings, objects) does not fit.

            >>> net.load_state_dict({k: v * 0 for k, v in net.state_dict().items()})
        """
        if not strict:
            return self.load_parameters(state)
        own = dict(self._persistent())
        given = {k for k in state if not k.endswith("num_batches_tracked")}
        missing, unexpected = sorted(set(own) - given), sorted(given - set(own))
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
        return self._load_fitting({name: state[name] for name in own}, own)

    def _load_fitting(self, state, own):
        """Assign ``state``'s values (names of ``own``'s Vars) once every one is checked to fit."""
        values, problems = {}, []
        for name, value in state.items():
            value = _as_array(value)
            problem = _misfit(name, value, own[name])
            if problem:
                problems.append(problem)
            else:
                values[name] = value
        if problems:
            raise ValueError("load_state_dict: nothing was loaded: " + "; ".join(problems))
        for name, value in values.items():
            own[name].update(value.astype(own[name].dtype, copy=False))
        return self

    def save(self, path):
        """Write ``state_dict()`` to ``path`` atomically (an interrupted save keeps the old file)."""
        persist.save(self.state_dict(), path)

    def load(self, path):
        """Load parameters saved by ``save`` (or a pickled dict of name -> array) as Jittor does,
        by ``load_parameters``: entries that do not fit are skipped with a warning."""
        return self.load_parameters(persist.load_dict(path, f"{type(self).__name__}.load"))

    def load_parameters(self, params):
        """Jittor's lenient load: each entry of ``params`` (arrays, Vars or PyTorch tensors) whose
        name, shape and dtype fit a Var of this module is loaded; the others are skipped with one
        warning naming them (fine-tuning loads a checkpoint whose head has another shape). Vars
        without an entry keep their values. ``load_state_dict(strict=True)`` is the strict form.

            >>> model.load_parameters(torch_model.state_dict())
        """
        own, fits, skipped = dict(self._persistent()), {}, []
        for name, value in params.items():
            value = _as_array(value)
            if name not in own:
                if not name.endswith("num_batches_tracked"):       # PyTorch's BatchNorm counter
                    skipped.append(f"{name} names no Var of the module")
            elif problem := _misfit(name, value, own[name]):
                skipped.append(problem)
            else:
                fits[name] = value
        if skipped:
            warnings.warn(f"load_parameters: {len(skipped)} of {len(params)} entries not loaded: "
                          + "; ".join(skipped), UserWarning, stacklevel=2)
        return self._load_fitting(fits, own)

    def mpi_param_broadcast(self, root=0):
        """Under mpirun, give every rank ``root``'s value of every Var of the tree (parameters and
        BatchNorm statistics); nothing outside mpirun. Optimizers do this for their parameters
        when they are built, so a training script needs it only after changing weights later.

            >>> model.mpi_param_broadcast(root=0)   # rank 0: unchanged    rank 1: rank 0's weights
        """
        broadcast_in_place(self.parameters(), root)


def _misfit(name, value, var):
    """Why the array ``value`` cannot be loaded into ``var`` (shape, or a dtype that does not cast
    within its kind, or int to float); None where it can."""
    if value.shape != var.shape:
        return f"{name} has shape {value.shape}, the module expects {var.shape}"
    if not np.can_cast(value.dtype, var.dtype, casting="same_kind"):
        return (f"{name} has dtype {value.dtype}, which does not cast to the module's {var.dtype} "
                f"(only within a kind, or int to float)")
    return None


def _as_array(value):
    """A state entry as a numpy array: arrays, lists, Vars, and PyTorch tensors (detached)."""
    if isinstance(value, Var):
        return value.numpy()
    if hasattr(value, "detach") and hasattr(value, "cpu"):     # a torch.Tensor, without importing torch
        return value.detach().cpu().numpy()
    return np.asarray(value)


def make_module(func, exec_n_args=1):
    """A Module class from a function: ``make_module(f)(*args, **kwargs)(*inputs)`` is
    ``f(*inputs, *args, **kwargs)``, the constructor's arguments following the inputs (Jittor's
    ``jt.make_module``; ``exec_n_args`` is kept for its signature, the call takes any inputs).

    >>> LeakyReLU = jt.make_module(nn.leaky_relu)
    >>> LeakyReLU(0.2)(jt.array([-1.0, 2.0])).numpy()
    array([-0.2,  2. ], dtype=float32)
    """
    if not callable(func):
        raise TypeError(f"make_module: func must be callable, got {type(func).__name__}")

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def execute(self, *inputs):
        return func(*inputs, *self.args, **self.kwargs)

    def extra_repr(self):
        return ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()])

    name = getattr(func, "__name__", type(func).__name__)
    return type(name, (Module,), {"__init__": __init__, "execute": execute, "extra_repr": extra_repr,
                                  "__repr__": lambda self: f"{name}({extra_repr(self)})"})


class Sequential(Module):
    """Layers applied in order; children are named "0", "1", ... (or by the keys of a dict).
    As in Jittor, an argument that is a list (or tuple) adds each of its layers, so
    ``Sequential([a, b])`` is ``Sequential(a, b)``, and a dict adds its layers under its keys.

    >>> block = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> block[0].weight.shape, len(block)
    ((8, 4), 3)
    >>> [n for n, _ in nn.Sequential([nn.Linear(4, 8), nn.Linear(8, 2)]).named_parameters()][::2]
    ['0.weight', '1.weight']
    """

    def __init__(self, *layers):
        self._layers = collections.OrderedDict()
        for layer in layers:
            if isinstance(layer, dict):
                for key, value in layer.items():
                    self._add(str(key), value)
            elif isinstance(layer, (list, tuple)):
                for value in layer:
                    self.append(value)
            else:
                self.append(layer)

    def _add(self, key, layer):
        # a layer that cannot be called would only fail at the first forward pass, far from here
        if not callable(layer):
            raise TypeError(f"Sequential: layer {key!r} must be a Module or a callable, got "
                            f"{type(layer).__name__}")
        self._layers[key] = layer

    def named_children(self):
        return ((k, v) for k, v in self._layers.items() if isinstance(v, Module))

    def _attributes(self):
        return iter(self._layers.items())

    def execute(self, x):
        for layer in self._layers.values():
            x = layer(x)
        return x

    def append(self, layer):
        """Add ``layer`` at the end, named by its position; returns self."""
        self._add(str(len(self._layers)), layer)
        return self

    def add_module(self, name, layer):
        """Add ``layer`` under ``name`` (replacing a layer of that name in place); returns self."""
        self._add(str(name), layer)
        return self

    def __getitem__(self, index):
        if isinstance(index, str):           # a dict-built Sequential's layer by its key
            if index not in self._layers:
                raise KeyError(f"Sequential has no layer {index!r}; its layers: {list(self._layers)}")
            return self._layers[index]
        return list(self._layers.values())[index]

    def __getattr__(self, name):
        layers = self.__dict__.get("_layers", {})
        if name in layers:                  # seq.conv1 for a layer added under "conv1"
            return layers[name]
        return object.__getattribute__(self, name)

    def keys(self):
        return self._layers.keys()

    def values(self):
        return self._layers.values()

    def items(self):
        return self._layers.items()

    def __len__(self):
        return len(self._layers)

    def __iter__(self):
        return iter(self._layers.values())
