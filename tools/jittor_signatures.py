"""Compare the arguments of Jittor's public functions and classes with jtmini's, by name and order.

A Jittor program passes arguments by position and by Jittor's keyword names; where jtmini orders
them otherwise, a positional call silently means something else (``RMSprop(p, lr, eps, alpha)``
read as alpha, eps). This reads a Jittor source release's Python files (no Jittor import: ``ast``)
and prints, per public function or class of the modules below:

    ORDER   the positional parameters jtmini has at the same positions are named otherwise
    KEYWORD a Jittor keyword name that jtmini's callable does not take (no ``**kwargs`` either)
    MISSING jtmini has no such name there

    python tools/jittor_signatures.py ~/jittor-1.3.11.0/python/jittor
    python tools/jittor_signatures.py DIR --ignore-renamed-first   # skip x/input/X-style renames

A differently named first parameter (``input`` against ``x``) is a keyword difference only; names
that differ in meaning at a position are the ones to look at.
"""
import argparse
import ast
import importlib
import inspect
import os
import sys

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's jtmini

# Jittor's file (relative to python/jittor) -> the jtmini module where its names live
MODULES = {"__init__.py": "jtmini", "misc.py": "jtmini", "contrib.py": "jtmini", "nn.py": "jtmini.nn",
           "pool.py": "jtmini.nn", "conv.py": "jtmini.nn", "optim.py": "jtmini.optim",
           "lr_scheduler.py": "jtmini.lr_scheduler", "init.py": "jtmini.init", "linalg.py": "jtmini.linalg",
           "distributions.py": "jtmini.distributions", "attention.py": "jtmini.attention",
           "weightnorm.py": "jtmini.weightnorm", "sparse.py": "jtmini.sparse",
           "transform/__init__.py": "jtmini.transform", "dataset/dataset.py": "jtmini.dataset",
           "dataset/mnist.py": "jtmini.dataset", "models/resnet.py": "jtmini.models.resnet",
           "models/vgg.py": "jtmini.models.vgg"}


def jittor_signatures(path):
    """(name, positional parameter names) of each public def and class (its ``__init__``'s, less
    ``self``) of a source file."""
    for node in ast.parse(open(path).read()).body:
        if node.name.startswith("_") if hasattr(node, "name") else True:
            continue
        if isinstance(node, ast.FunctionDef):
            args = node.args
            yield node.name, [a.arg for a in args.posonlyargs + args.args]
        elif isinstance(node, ast.ClassDef):
            init = next((b for b in node.body if isinstance(b, ast.FunctionDef) and b.name == "__init__"), None)
            if init is not None:
                yield node.name, [a.arg for a in init.args.posonlyargs + init.args.args][1:]


def compare(theirs, obj, skip_first=False):
    """Lines of findings for one callable (empty when it agrees); ``skip_first``: the first
    parameter may be named otherwise (``input`` against ``x``)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    params = list(sig.parameters.values())
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_more = any(p.kind == p.VAR_POSITIONAL for p in params)
    takes_any_keyword = any(p.kind == p.VAR_KEYWORD for p in params)
    aliases = getattr(obj, "keyword_aliases", {})          # ops/registry.keyword_aliases: alias -> name
    theirs_as_ours = [aliases.get(t, t) for t in theirs]
    found, first = [], int(skip_first)
    n = min(len(theirs), len(positional))
    too_few = len(positional) < len(theirs) and not (takes_more or takes_any_keyword)
    if theirs_as_ours[first:n] != positional[first:n] or too_few:
        found.append(f"ORDER   jittor({', '.join(theirs)}) jtmini({', '.join(positional)})")
    names = {p.name for p in params} | set(aliases)
    lacking = [t for t in theirs[first:] if t not in names]
    if lacking and not takes_any_keyword:
        found.append(f"KEYWORD jtmini lacks {', '.join(lacking)}")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jittor_dir", help="python/jittor of a Jittor source release")
    parser.add_argument("--ignore-renamed-first", action="store_true",
                        help="do not report a first parameter that only has another name")
    args = parser.parse_args()
    for rel, module_name in MODULES.items():
        path = os.path.join(args.jittor_dir, rel)
        if not os.path.exists(path):
            continue
        module = importlib.import_module(module_name)
        for name, theirs in jittor_signatures(path):
            obj = getattr(module, name, None)
            if obj is None:
                print(f"{module_name}.{name}: MISSING")
                continue
            for line in compare(theirs, obj, args.ignore_renamed_first):
                print(f"{module_name}.{name}: {line}")


if __name__ == "__main__":
    main()
