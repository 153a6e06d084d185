"""Run a notebook's own functions in worker processes: their source travels with the workers.

A worker process imports the package, not the learner's kernel: a function the learner edited in
a notebook cell exists only in the kernel. `worker_call(fn, module)` says how a `WorkerGroup`
runs `fn` anyway: the target 'module:name' plus the source of `fn` and of every function it
calls by name from the same namespace (the kernel's cells), callees first. The worker runs those
sources in a copy of `module`'s namespace (`worker_main.load_target`), so the edited functions
replace the package's and still see its constants and imports. `inspect.getsource` finds a
cell's source because IPython keeps every cell it ran in `linecache`.

A function that is the module's own (the package's copy) ships nothing: the worker imports it.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable


def called_names(code: types.CodeType) -> set[str]:
    """Every global name `code` and the functions nested in it refer to."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= called_names(constant)
    return names


def function_sources(fn: Callable) -> list[str]:
    """The source of `fn` and of each function it calls by name from its own namespace,
    recursively, callees first (so that each is defined before it is needed)."""
    ordered: dict[str, str] = {}

    def visit(function) -> None:
        if function.__name__ in ordered:
            return
        ordered[function.__name__] = ""  # a placeholder: recursion ends here
        for name in sorted(called_names(function.__code__)):
            other = function.__globals__.get(name)
            if inspect.isfunction(other) and other.__globals__ is function.__globals__:
                visit(other)
        ordered.pop(function.__name__)
        ordered[function.__name__] = inspect.getsource(function)

    visit(fn)
    return list(ordered.values())


def worker_call(fn: Callable, module: str) -> tuple[str, list[str]]:
    """(target, sources) for a `WorkerGroup` that runs `fn` as `module`'s function of that name:
    nothing to ship when `fn` is the module's own."""
    if not inspect.isfunction(fn):
        raise TypeError(f"a worker runs a function defined with def, got {fn!r}")
    target = f"{module}:{fn.__name__}"
    if fn.__module__ == module:
        return target, []
    return target, function_sources(fn)
