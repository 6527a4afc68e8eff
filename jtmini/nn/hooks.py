"""Hooks on modules and Vars, as in Jittor (and PyTorch): code run before or after a module's
forward, code that sees or replaces the gradients flowing through a module or a Var, and
``requires_grad_`` to run a module without recording gradients.

A module with no hook is called directly (``Module.__call__`` looks for ``_hooks`` only), so
hooks cost nothing where they are not used.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> relu = nn.ReLU()
    >>> handle = relu.register_forward_hook(lambda mod, args, out: print(out.shape))
    >>> _ = relu(jt.ones(2, 3))
    (2, 3)
    >>> handle.remove()
"""
import contextlib

from ..autograd import custom_grad, no_grad
from ..var import Var


class HookHandle:
    """Returned by the ``register_*`` methods: ``remove()`` takes the hook off again."""

    def __init__(self, hooks, fn):
        self._hooks, self._fn = hooks, fn

    def remove(self):
        if self._fn in self._hooks:
            self._hooks.remove(self._fn)


def hook_table(module):
    """The module's hooks, made on first use: lists of pre-forward, forward and backward hooks
    (Jittor's input and output backward hooks too), and whether the module records gradients."""
    if "_hooks" not in vars(module):
        module._hooks = {"pre": [], "forward": [], "backward": [], "input_backward": [], "output_backward": [],
                         "grad": True}
    return module._hooks


def remove_hooks(module, *kinds):
    """Take off every hook of ``kinds`` (Jittor's ``remove_forward_hook()`` and the like)."""
    if "_hooks" in vars(module):
        for kind in kinds:
            module._hooks[kind].clear()


def add_hook(module, kind, fn):
    if not callable(fn):
        raise TypeError(f"{type(module).__name__}: a {kind} hook must be callable, got {type(fn).__name__}")
    hooks = hook_table(module)[kind]
    hooks.append(fn)
    return HookHandle(hooks, fn)


def _passthrough(x, rule):
    """A new Var equal to ``x`` whose gradient is ``rule(d)`` (``d`` itself where it gives None)."""
    def backward(d):
        g = rule(d)
        return [d if g is None else g]
    return custom_grad(x.clone(), [x], backward)


def _only_var(value, who, what):
    if not isinstance(value, Var):
        raise NotImplementedError(f"{who}: backward hooks need a module called with one Var and "
                                  f"returning one Var; its {what} is {type(value).__name__}")


def _one_var_argument(module, args, kwargs, kind):
    """``args[0]``, the one Var a module with ``kind`` hooks must be called with."""
    who = type(module).__name__
    if len(args) != 1 or kwargs:
        raise NotImplementedError(f"{who}: {kind} hooks need a module called with one Var "
                                  f"argument, got {len(args)} positional and {len(kwargs)} keyword")
    _only_var(args[0], who, "argument")
    return args[0]


def _hook_gradients(module, args, kwargs, hooks, run):
    """``run(args)`` with the module's one Var input and output passed through nodes that hand
    (grad_input, grad_output) to each backward hook, a hook's returned tuple replacing grad_input."""
    who = type(module).__name__
    _one_var_argument(module, args, kwargs, "backward")
    seen = {}

    def on_input(d):
        grad = (d,)
        for fn in hooks:
            replaced = fn(module, grad, (seen.get("out"),))
            grad = grad if replaced is None else tuple(replaced)
        return grad[0]
    out = run((_passthrough(args[0], on_input),))
    _only_var(out, who, "result")
    return _passthrough(out, lambda d: seen.__setitem__("out", d))


def _gradient_hooked(module, value, hooks, what):
    """``value`` (one Var) passed through a node handing its gradient, as a 1-tuple, to each of
    Jittor's input or output backward ``hooks`` in turn; a returned tuple replaces it."""
    _only_var(value, type(module).__name__, what)

    def rule(d):
        grad = (d,)
        for fn in hooks:
            replaced = fn(grad)
            grad = grad if replaced is None else tuple(replaced)
        return grad[0]
    return _passthrough(value, rule)


def _args_and_kwargs(value):
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple) and isinstance(value[1], dict)


def hooked_call(module, args, kwargs, run):
    """Call ``run(args)`` (the module's forward) with its hooks around it."""
    hooks = module._hooks
    for fn in list(hooks["pre"]):
        changed = fn(module, args, kwargs) if kwargs else fn(module, args)
        if _args_and_kwargs(changed):          # Jittor's form: (new_args, new_kwargs)
            args, kwargs = changed
        elif changed is not None:              # PyTorch's: the new arguments
            args = changed if isinstance(changed, tuple) else (changed,)
    if hooks["input_backward"]:
        x = _one_var_argument(module, args, kwargs, "input backward")
        args = (_gradient_hooked(module, x, list(hooks["input_backward"]), "argument"),)
    scope = contextlib.nullcontext() if hooks["grad"] else no_grad()
    with scope:
        if hooks["backward"]:
            out = _hook_gradients(module, args, kwargs, list(hooks["backward"]), lambda a: run(a, kwargs))
        else:
            out = run(args, kwargs)
    if hooks["output_backward"]:
        out = _gradient_hooked(module, out, list(hooks["output_backward"]), "result")
    for fn in list(hooks["forward"]):
        changed = fn(module, args, out, kwargs) if kwargs else fn(module, args, out)   # Jittor's order
        if changed is not None:
            out = changed
    return out

