"""Containers of modules and parameters: ``ModuleList``, ``ModuleDict`` and ``ParameterList``.

Their items are named by position ("0", "1", ...) or by key, as in PyTorch, so a model holding
``self.blocks = nn.ModuleList([...])`` has parameters ``blocks.0.weight``, ``blocks.1.weight``, ...
and its ``state_dict`` loads into the PyTorch twin by name. A model's ``execute`` indexes or
iterates them; a ModuleList called runs its layers in order, as Jittor's (which is Sequential).

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> class Net(jt.Module):
    ...     def __init__(self):
    ...         self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
    ...     def execute(self, x):
    ...         for block in self.blocks:
    ...             x = block(x)
    ...         return x
    >>> [name for name, _ in Net().named_parameters()]
    ['blocks.0.weight', 'blocks.0.bias', 'blocks.1.weight', 'blocks.1.bias']
"""
import collections
from collections.abc import Iterable, Mapping

from ..var import Var
from .module import Module


def _entries(values, kind, who):
    """The items of a container's arguments: each one a ``kind`` item or an iterable of them
    (Jittor passes items, PyTorch one list); a TypeError naming ``who`` for anything else."""
    items = []
    for value in values:
        if isinstance(value, kind):
            items.append(value)
        elif isinstance(value, Iterable) and not isinstance(value, (str, Mapping, Var, Module)):
            items.extend(value)
        elif value is not None:
            raise TypeError(f"{who}: expected items or an iterable of items, got "
                            f"{type(value).__name__}")
    return items


def _position(index, length, who):
    """``index`` (an int, negative counting from the end) as a position in ``range(length)``."""
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"{who} indices must be ints or slices, got {type(index).__name__}")
    if not -length <= index < length:
        raise IndexError(f"{who} index {index} is out of range for length {length}")
    return index % length


class _ListContainer(Module):
    """The list behaviour shared by ModuleList and ParameterList: every item is a ``_kind``
    and is named by its position."""

    _kind = Module

    def __init__(self, *values):
        self._items = []
        for item in _entries(values, self._kind, type(self).__name__):
            self.append(item)

    def _check(self, item, where):
        if not isinstance(item, self._kind):
            raise TypeError(f"{type(self).__name__}: item {where} must be a {self._kind.__name__}, "
                            f"got {type(item).__name__}")
        return item

    def _attributes(self):
        return ((str(k), item) for k, item in enumerate(self._items))

    def named_children(self):
        return ((str(k), m) for k, m in enumerate(self._items) if isinstance(m, Module))

    def execute(self, *args, **kwargs):
        name = type(self).__name__
        raise TypeError(f"{name} is not callable: index it or iterate over it in execute")

    def append(self, item):
        """Add ``item`` at the end; returns self."""
        self._items.append(self._check(item, len(self._items)))
        return self

    def extend(self, values):
        """Add every item of the iterable ``values`` at the end; returns self."""
        if isinstance(values, (str, Mapping, self._kind)) or not isinstance(values, Iterable):
            raise TypeError(f"{type(self).__name__}.extend: expected an iterable of items, got "
                            f"{type(values).__name__}")
        for item in list(values):
            self.append(item)
        return self

    def insert(self, index, item):
        """Put ``item`` before position ``index`` (list.insert's rule); returns self."""
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"{type(self).__name__}.insert: index must be an int, got "
                            f"{type(index).__name__}")
        self._items.insert(index, self._check(item, index))
        return self

    def __getitem__(self, index):
        if isinstance(index, slice):
            return type(self)(self._items[index])
        return self._items[_position(index, len(self._items), type(self).__name__)]

    def __setitem__(self, index, item):
        k = _position(index, len(self._items), type(self).__name__)
        self._items[k] = self._check(item, k)

    def __delitem__(self, index):
        if isinstance(index, slice):
            del self._items[index]
        else:
            del self._items[_position(index, len(self._items), type(self).__name__)]

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(list(self._items))


class ModuleList(_ListContainer):
    """A list of modules whose parameters the owning module finds, named "0", "1", ... Takes
    modules, lists of them, or both (``ModuleList([a, b])`` as PyTorch, ``ModuleList(a, b)`` as
    Jittor); indexing with a slice gives a new ModuleList; ``append``, ``extend``, ``insert``
    and ``del`` renumber the names.

    >>> layers = nn.ModuleList([nn.Linear(2, 3), nn.ReLU()])
    >>> _ = layers.append(nn.Linear(3, 1)).insert(0, nn.Identity())
    >>> len(layers), type(layers[-1]).__name__, [n for n, _ in layers.named_parameters()][0]
    (4, 'Linear', '1.weight')
    """

    _kind = Module

    def execute(self, x):
        """Jittor's ModuleList is its Sequential: called, it runs its layers in order."""
        for layer in self._items:
            x = layer(x)
        return x


class ParameterList(_ListContainer):
    """A list of Vars that ``Module.parameters()`` finds, named "0", "1", ... (``scales.0`` in
    the owning module), so optimizers update them and ``state_dict`` saves them. Takes Vars,
    lists of them, or both, and behaves as ModuleList does.

    >>> scales = nn.ParameterList([jt.ones(3), jt.zeros(3)])
    >>> _ = scales.append(jt.randn(2))
    >>> [name for name, _ in scales.named_parameters()]
    ['0', '1', '2']
    """

    _kind = Var


class ModuleDict(Module):
    """An ordered dict of modules whose parameters the owning module finds, each under its key
    (``heads.cls.weight``). Takes a dict or an iterable of (key, module) pairs; keys are non-empty
    strings without ".". Supports ``[]``, ``[]=``, ``del``, ``in``, ``len``, iteration over the
    keys, ``keys``, ``values``, ``items``, ``update`` and ``pop``; ``heads.cls`` reads an entry, as
    PyTorch's.

    >>> heads = nn.ModuleDict({"cls": nn.Linear(8, 10), "box": nn.Linear(8, 4)})
    >>> heads["box"].weight.shape, "cls" in heads, list(heads.keys())
    ((4, 8), True, ['cls', 'box'])
    """

    _kind = Module

    def __init__(self, modules=None):
        self._modules = collections.OrderedDict()
        if modules is not None:
            self.update(modules)

    def _attributes(self):
        return iter(self._modules.items())

    def __getattr__(self, name):
        """Called only for a missing attribute: an entry by its key (``heads.cls``), as PyTorch's."""
        entries = vars(self).get("_modules", {})
        if name in entries:
            return entries[name]
        raise AttributeError(f"{type(self).__name__} has no attribute or entry {name!r}")

    def named_children(self):
        return iter([(k, m) for k, m in self._modules.items() if isinstance(m, Module)])

    def execute(self, *args, **kwargs):
        name = type(self).__name__
        raise TypeError(f"{name} is not callable: look its items up by key in execute")

    def update(self, modules):
        """Add (or replace) the modules of a dict or of an iterable of (key, module) pairs."""
        name = type(self).__name__
        if isinstance(modules, Mapping):
            pairs = list(modules.items())
        elif isinstance(modules, Iterable) and not isinstance(modules, (str, Module, Var)):
            pairs = list(modules)
        else:
            raise TypeError(f"{name}: expected a dict or an iterable of (key, item) pairs, "
                            f"got {type(modules).__name__}")
        for k, pair in enumerate(pairs):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"{name}: entry {k} must be a (key, {self._kind.__name__.lower()}) pair, got {pair!r}")
            self[pair[0]] = pair[1]
        return self

    def __setitem__(self, key, module):
        name = type(self).__name__
        if not isinstance(key, str):
            raise TypeError(f"{name} keys must be strings, got {type(key).__name__} {key!r}")
        if not key or "." in key:
            raise ValueError(f"{name} key {key!r} must be non-empty and hold no '.' (it is a "
                             f"part of dotted parameter names)")
        if not isinstance(module, self._kind):
            raise TypeError(f"{name}[{key!r}] must be a {self._kind.__name__}, got {type(module).__name__}")
        self._modules[key] = module

    def __getitem__(self, key):
        return self._modules[key]

    def __delitem__(self, key):
        del self._modules[key]

    def __contains__(self, key):
        return key in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(list(self._modules))

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def pop(self, key):
        """Remove the module under ``key`` and return it (KeyError if absent)."""
        return self._modules.pop(key)


class ParameterDict(ModuleDict):
    """An ordered dict of Vars that ``Module.parameters()`` finds, each under its key
    (``scales.a`` in the owning module), so optimizers update them and ``state_dict`` saves
    them. Takes a dict or (key, Var) pairs and behaves as ModuleDict does.

    >>> scales = nn.ParameterDict({"a": jt.ones(3), "b": jt.zeros(2)})
    >>> [name for name, _ in scales.named_parameters()], scales["b"].shape
    (['a', 'b'], (2,))
    """

    _kind = Var


__all__ = ["ModuleDict", "ModuleList", "ParameterDict", "ParameterList"]
