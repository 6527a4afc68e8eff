"""The value a parameter had before an optimizer step that updated its buffer in place.

A host program (``runtime/cpu_inplace.py``) writes a parameter's (or optimizer state's) new value
over its old buffer when nothing can read the old value any more. A graph the user keeps (the
step's ``loss``) still names the old value through this node; computing from it raises, as
PyTorch refuses a backward through a tensor an optimizer changed in place, instead of giving
numbers from the new value.

    >>> loss = nn.cross_entropy_loss(model(x), y); opt.step(loss)
    >>> jt.grad(loss, x)     # RuntimeError: ... reads the old value of a parameter (shape ...)
"""
from .registry import OpSpec, register


def _gone(arrays, a, backend):
    raise RuntimeError(f"a graph built before an optimizer step reads the old value of a parameter (shape "
                       f"{tuple(a['shape'])}, {a['dtype']}) that the step overwrote in place; compute what "
                       f"you need from that graph (jt.sync, .numpy(), jt.grad) before the step, or set "
                       f"jt.flags.inplace_update = 0 to keep old values")


def _no_grad(d, out, a):
    return []


register(OpSpec("overwritten", "library", infer=lambda inputs, a: (a["shape"], a["dtype"]), run=_gone, grad=_no_grad))
