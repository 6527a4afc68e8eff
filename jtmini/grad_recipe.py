"""Rebuild a backward graph from a recipe when the forward graph repeats (``jt.grad``'s cache).

A training loop's forward graph is the same every step: ops, attrs, shapes and wiring, on new
Vars. ``jt.grad`` applies each op's gradient rule to it in reverse order, and the rules build the
same backward nodes every step (~1 ms of Python a GAN step). So the first time a forward graph is
met, ``record`` writes down the nodes the rules built, each with its inputs as references: a
forward node (by its place in ``forward_order``'s order), an earlier recorded node, or a shared
constant made before; a later graph with the same ``key`` gets the same nodes made directly by
``Recipe.build`` (``Var(op, inputs, attrs, shape, dtype)``), with none of the rules' Python.
Nodes the rules built that no gradient reads are not rebuilt (30 of the GAN step's 259 Vars).
``grad`` took 565 us of CPU a GAN step against 1110 (``tools/step_phases.py``, loaded 2-core VM;
MLP: 136 against 281), with the forward walk made cheaper at the same time.

The key holds, per forward node, all a rule may look at: op, every attr (runtime ones too: a
rule may turn a constant's value into another node's), shape, dtype, stop_grad, whether it has a
value, its inputs by place; the targets' places, shapes and dtypes; and the flags that change how
ops build nodes (the backend among them: some rules build host-only kernels). Nothing is recorded (grad runs its rules every time) when a forward node has a
rule of its own (hooks, ``Function``, a ``custom_grad`` without a declared ``key``: closures that
may read anything; a declared rule is keyed by its ``key`` and its inputs and saved Vars), when a
rule computed a value (a graph shaped by data), or when a built node reads a Var that is neither
in the forward graph, nor built by the rules, nor an input-less constant (one read by a stop_grad
forward node does not count: the key leaves those inputs out), or when a rule built a collective
that no gradient reads or that was issued at once. The collectives the rules built (synchronised
BatchNorm's sums under mpirun) are queued for MPI as they are made, so a recipe queues its
rebuilt ones after building them, in the order the rules made them: every rank issues the same
sequence whether it ran the rules or a recipe. Eager mode and memory profiling (which records
the frames building each node) always run the rules.

    >>> start = mark(order)
    >>> grads = ...                         # the rules, as usual
    >>> record(key, order, start, grads)    # the next graph of this key: find(key).build(order)
"""
import collections
from typing import NamedTuple

from . import key_code, native_walk
from .flags import flags
from .ops import collective
from .ops.registry import OPS
from .state import HashedKey, register_cache
from .var import _ids, _pending, made, untrack

CAPACITY = 16                       # forward graphs remembered (the losses of a few optimizers)
_recipes = collections.OrderedDict()  # HashedKey -> Recipe
register_cache("grad recipes", _recipes.clear, f"the backward nodes of the {CAPACITY} forward graphs used last")

FORWARD, BUILT, SHARED = 0, 1, 2    # where a recorded input is: the forward order, the recipe, a constant


class Node(NamedTuple):
    """A node the gradient rules built: what ``Var.node`` made, inputs as ``(where, k)`` references."""
    op: str
    attrs: dict
    shape: object
    dtype: str
    stop_grad: bool
    tracked: bool           # in the pending table (a shared constant is not)
    inputs: tuple


class Recipe(NamedTuple):
    nodes: tuple            # ``Node`` s, inputs before readers
    shared: tuple           # the input-less constants the nodes read that the rules did not build
    results: tuple          # a reference per gradient returned
    queue: tuple            # places in ``nodes`` of the collectives, in the order the rules made them

    def build(self, order):
        """The gradients, as ``jt.grad`` returned them for the recorded graph, on ``order`` (the
        forward graph of a new step with the same key)."""
        built = native_walk.make_nodes(self.nodes, order, self.shared)
        if built is None:
            built = self._made(order)
        sources = (order, built, self.shared)
        for k in self.queue:
            collective.queue(built[k])
        return [sources[where][k] for where, k in self.results]

    def _made(self, order):
        """The nodes, made in Python (``native_walk.make_nodes`` makes the same in C)."""
        built = []
        sources = (order, built, self.shared)
        for op, attrs, shape, dtype, stop_grad, tracked, inputs in self.nodes:
            # shape and dtype are a recorded Var's own: already a shared Shape and a named dtype
            v = made(op, tuple([sources[where][k] for where, k in inputs]), dict(attrs), shape, dtype)
            if stop_grad:
                v._stop_grad = True
            if not tracked:
                untrack(v)
            built.append(v)
        return built


def key(order, targets):
    """The recipe key of the forward graph ``order`` (``forward_order(loss)``, loss last) and
    ``targets``; None when its gradient must be built by the rules (see the module doc)."""
    if not flags.lazy_execution or flags.profile_memory_enable:   # eager, or each node's frames wanted
        return None
    place, code = {}, key_code.Code()
    for v in order:
        place[id(v)] = len(place)
        if not _add_row(v, place, code):
            return None
    return _key_of(code, targets, place)


def graph_and_key(loss, targets):
    """``(order, key)``: ``forward_order(loss)`` and ``key(order, targets)`` from one walk, in C
    where ``native_walk`` is built (the Python walks cost ~2 us a node of a GAN step)."""
    keyed = flags.lazy_execution and not flags.profile_memory_enable
    walked = native_walk.grad_walk(loss, targets if type(targets) is list else list(targets), keyed)
    if walked is None:
        return _graph_and_key_py(loss, targets)
    order, code, places = walked
    if code is None:
        return order, None
    wanted = tuple([(k, t.shape, t.dtype, t._stop_grad) for k, t in zip(places, targets)])
    return order, _hashed(code, wanted)


def forward_order(loss):
    """The nodes on which ``loss`` depends, inputs before consumers, not crossing stop_grad: the
    order ``jt.grad`` runs the rules in (backward), as ``graph_and_key`` walks it."""
    return _graph_and_key_py(loss, (), keyed=False)[0]


def _graph_and_key_py(loss, targets, keyed=True):
    """``graph_and_key`` in Python: each node's row is written as the walk places it, its
    inputs placed before it. A node stays on the stack while its inputs go first and is placed
    when it is back on top (a DFS of (node, expanded) pairs without a tuple per push)."""
    order, seen, place, code, stack = [], set(), {}, key_code.Code(), [loss]
    keyed = keyed and flags.lazy_execution and not flags.profile_memory_enable
    while stack:
        v = stack[-1]
        vid = id(v)
        if vid not in seen:
            seen.add(vid)
            if not v._stop_grad:
                stack.extend([inp for inp in (v._backward[0] if v._backward is not None else v.inputs)
                              if id(inp) not in seen])
            continue
        stack.pop()
        if vid in place:
            continue
        place[vid] = len(order)
        order.append(v)
        if keyed:
            keyed = _add_row(v, place, code)
    return order, _key_of(code, targets, place) if keyed else None


def _add_row(v, place, code):
    """Write ``v``'s key row (see ``key``) into ``code`` (a ``key_code.Code``); False where the
    graph gets no key. A node with a rule of its own is keyed by its declared rule
    (``custom_grad``'s ``key``) and the Vars the walk went to from it; an undeclared rule gives
    no key."""
    walked, rule = v.inputs, None
    if v._backward is not None:
        walked, rule = v._backward[0], getattr(v._backward[1], "recipe_key", None)
        if rule is None:
            return False
    try:    # a stop_grad node's inputs are not walked (a node reading them is not kept, see record)
        inputs = () if v._stop_grad else tuple([place[id(i)] for i in walked])
    except KeyError:                # not an order _graph makes: no recipe rather than a wrong one
        return False
    attrs = v.attrs
    if "seq" in attrs and OPS[v.op].stateful:   # a draw's order, new every step and read by no rule
        attrs = {n: a for n, a in attrs.items() if n != "seq"}
    items = tuple(attrs.items())
    if rule is not None:
        items += (("__rule__", rule),)
    code.value(v.op)
    code.attrs(items)
    code.value(v.shape)
    code.value(v.dtype)
    code.flag(v._stop_grad)
    code.flag(v._data is None)
    code.ints(inputs)
    return True


def _key_of(code, targets, place):
    return _hashed(code.done(), tuple((place.get(id(t), -1), t.shape, t.dtype, t._stop_grad) for t in targets))


def _hashed(code, wanted):
    """The key of rows written as ``key_code`` bytes and the values kept aside: ``code``."""
    try:
        return HashedKey((*code, wanted, flags.no_grad, flags.amp_reg, flags.auto_convert_64_to_32,
                          flags.backend, flags.use_cuda))
    except TypeError:                   # an attr that cannot be hashed
        return None


def clear():
    """Forget every recipe (a test that swaps a rule's helper builds the same graph anew)."""
    _recipes.clear()


def find(key_):
    """The ``Recipe`` stored under ``key_`` (a ``key`` result), or None."""
    if key_ is None:
        return None
    recipe = _recipes.get(key_)
    if recipe is not None:
        native_walk.enable()            # a forward graph repeats: walk the next ones in C
        try:
            _recipes.move_to_end(key_)
        except KeyError:                # dropped by another thread in between: still a valid recipe
            pass
    return recipe


class Mark(NamedTuple):
    """Where the rules start: a Var id below every Var built from now on, the collectives made
    so far, and which forward nodes had no value yet."""
    var_id: int
    collectives: int
    pending: list


def mark(order):
    """The ``Mark`` of now, for the forward graph ``order``: call it before the rules run."""
    return Mark(next(_ids), collective.made_count(), [v._data is None for v in order])


def record(key_, order, start, results):
    """Store the recipe of ``results`` (the gradients the rules just built, every node made
    after ``mark(order)`` returned ``start``, a ``Mark``) under ``key_``, unless it is unsafe (see
    the module doc)."""
    if key_ is None or [v._data is None for v in order] != start.pending:
        return                          # a rule computed a forward value: the graph may follow data
    place = {id(v): (FORWARD, k) for k, v in enumerate(order)}
    # a stop_grad node's inputs are not in the key: a constant among them may differ next time
    fenced = {id(i) for v in order if v._stop_grad for i in v.inputs}
    nodes, shared, queued = [], [], []
    try:
        refs = tuple(_reference(v, start.var_id, place, fenced, nodes, shared, queued) for v in results)
    except _Unsafe:
        return
    if len(queued) != collective.made_count() - start.collectives:
        return                          # a collective no gradient reads: a recipe would not issue it
    queue = tuple(k for _, k in sorted(queued))     # by Var id: the order the rules made them
    _recipes[key_] = Recipe(tuple(nodes), tuple(shared), refs, queue)
    if len(_recipes) > CAPACITY:
        _recipes.popitem(last=False)


class _Unsafe(Exception):
    """A built node that a recipe could not rebuild faithfully."""


def _reference(root, start, place, fenced, nodes, shared, queued):
    """``(where, k)`` of ``root``, recording the built nodes it reads first (iterative DFS);
    ``queued`` gets ``(Var id, place in nodes)`` of each collective among them."""
    stack = [(root, False)]
    while stack:
        v, inputs_placed = stack.pop()
        if id(v) in place:
            continue
        if v.id <= start:               # made before the rules ran and not in the forward graph
            if v.op != "const" or v.inputs or id(v) in fenced:
                raise _Unsafe
            place[id(v)] = (SHARED, len(shared))
            shared.append(v)
        elif not inputs_placed:
            if v._data is not None or v._backward is not None or v.op is None:
                raise _Unsafe           # a computed value (an issued collective too), a rule of its own
            stack.append((v, True))
            stack.extend((i, False) for i in v.inputs if id(i) not in place)
        else:
            place[id(v)] = (BUILT, len(nodes))
            if OPS[v.op].kind == "collective":
                queued.append((v.id, len(nodes)))
            nodes.append(Node(v.op, dict(v.attrs), v.shape, v.dtype, v._stop_grad, id(v) in _pending,
                              tuple(place[id(i)] for i in v.inputs)))
    return place[id(root)]

