"""Functions sent to another process as source, so that it runs the code a notebook defined.

`function_source(name=function, ...)` collects each function's source and what it uses from its
module: other functions there (sent too, so an edited helper travels with its callers), the
modules it names (sent as `import` lines), classes and functions it took from a package module
(sent as `from MODULE import NAME` lines: the other process imports the same ones) and plain
numbers and strings (sent as values). The
result is JSON; `load_functions(sent)` runs it in a fresh namespace in the other process and
returns the functions by the same names.

`inspect.getsource` reads a function defined in a notebook cell because IPython keeps each cell's
text in `linecache`; `load_functions` registers the text it runs the same way, so that AutoGraph
(which reads a `tf.function`'s source) and tracebacks can read it there too.
"""

from __future__ import annotations

import ast
import builtins
import dis
import inspect
import linecache
import textwrap
import types
from collections.abc import Callable, Iterator

PLAIN = (bool, int, float, str, type(None))


def function_source(**functions: Callable) -> dict:
    """{'code': source text, 'names': {argument: function name}}: everything the functions use.

    Refuses (TypeError, naming the function) a lambda, a function defined inside another, and a
    function that uses a notebook variable that is neither a function, a module nor a plain
    number or string: pass such a value as an argument instead.
    """
    imports, values, sources, sent = [], [], [], {}
    pending = list(functions.values())
    while pending:
        function = _plain(pending.pop(0))
        earlier = sent.get(function.__name__)
        if earlier is function:
            continue
        if earlier is not None:
            raise TypeError(f"two different functions are both called {function.__name__!r}")
        sent[function.__name__] = function
        sources.append(_source(function))
        for name in sorted(_global_names(function)):
            if name not in function.__globals__:
                if hasattr(builtins, name):
                    continue
                raise TypeError(f"{function.__name__} uses {name!r}, which is not defined")
            value = function.__globals__[name]
            if isinstance(value, types.ModuleType):
                line = f"import {value.__name__} as {name}"
                imports += [line] if line not in imports else []
            elif _importable(value, function):
                line = f"from {value.__module__} import {value.__qualname__} as {name}"
                imports += [line] if line not in imports else []
            elif _plain_or_none(value) is not None:
                pending.append(value)
            elif isinstance(value, PLAIN):
                line = f"{name} = {value!r}"
                values += [line] if line not in values else []
            else:
                raise TypeError(
                    f"{function.__name__} uses {name!r}, a {type(value).__name__}, which cannot "
                    "be sent to another process: pass it as an argument instead"
                )
    code = "\n".join(imports + values) + "\n\n\n" + "\n\n\n".join(sources)
    names = {argument: _plain(f).__name__ for argument, f in functions.items()}
    return {"code": code, "names": names}


def load_functions(sent: dict, label: str = "notebook") -> dict[str, Callable]:
    """The functions of a `function_source` answer, defined afresh in this process."""
    code = sent["code"]
    filename = f"<functions sent from the {label}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    namespace = {"__name__": "__sent__"}
    exec(compile(code, filename, "exec"), namespace)
    return {argument: namespace[name] for argument, name in sent["names"].items()}


def _importable(value, function) -> bool:
    """A class, or a function of another module than `function`'s, that an import can reach."""
    if not isinstance(value, (type, types.FunctionType)):
        return False
    module = getattr(value, "__module__", None)
    if isinstance(value, types.FunctionType) and module == function.__module__:
        return False  # a helper beside it (a notebook cell's, say): its source is sent
    return bool(module) and module not in ("__main__", "builtins") and "<" not in value.__qualname__


def _plain_or_none(value):
    """The Python function inside a `tf.function`, the function itself, or None."""
    value = getattr(value, "python_function", value)
    return value if isinstance(value, types.FunctionType) else None


def _plain(function) -> types.FunctionType:
    plain = _plain_or_none(function)
    if plain is None:
        raise TypeError(f"{function!r} is not a Python function, so it cannot be sent")
    if plain.__name__ == "<lambda>" or "<locals>" in plain.__qualname__:
        raise TypeError(
            f"{plain.__qualname__} cannot be sent to another process: define it with `def` at "
            "a cell's (or module's) top level"
        )
    return plain


def _source(function: types.FunctionType) -> str:
    try:
        return textwrap.dedent(inspect.getsource(function)).strip("\n")
    except (OSError, TypeError) as error:
        raise TypeError(f"the source of {function.__name__} cannot be read: {error}") from error


def _global_names(function: types.FunctionType) -> set[str]:
    """Names the function looks up in its module: in its body (nested functions included), and
    in its decorators and default values, which run where it is defined."""
    names = {
        op.argval
        for code in _code_objects(function.__code__)
        for op in dis.get_instructions(code)
        if op.opname in ("LOAD_GLOBAL", "LOAD_NAME")
    }
    (definition,) = ast.parse(_source(function)).body
    outside = [*definition.decorator_list, *definition.args.defaults]
    outside += [d for d in definition.args.kw_defaults if d is not None]
    names |= {n.id for part in outside for n in ast.walk(part) if isinstance(n, ast.Name)}
    return names


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _code_objects(constant)
