"""User plugins: Python files outside the package that register op variants, or declare new ops.

A plugin is a plain file that uses the stable import:

    from fusebench.models.ops import register

    @register("softcap", "mine")
    def softcap_mine(x, cap):
        ...

A new op is declared as models/ops.py declares the built-in ones: `declare` it, `register` its
variants (its reference and default among them) and, for `fusebench ops` and `fusebench kernels`,
`register_calls` its calls.

`load_plugins` imports each file by path and reports its sha256, so a result can name exactly which
code ran. Anything that goes wrong while importing, a syntax error, an exception at import time, a
variant for an op that does not exist, becomes one `PluginError` line: `FILE:LINE: plugin:
<ExceptionType>: <message>`. A failed plugin leaves the registry as it found it. Loading the same
file again is harmless: unchanged, it is not re-imported; changed, it replaces the variants (and
ops) it registered before. A plugin may not replace a variant that it does not own (a built-in or
another plugin's), nor declare an op that exists: that would silently change what an existing name
measures.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from fusebench.models.calls import CALLS, calls_of
from fusebench.models.ops import REGISTRY, OpCalls, OpSpec, op_choices

from ..core.errors import UserError
from ..core.experiment import Experiment, resolve_ops


class PluginError(UserError):
    """A plugin file that could not be loaded; the message is one line,
    `FILE:LINE: plugin: Type: message`."""


@dataclass(frozen=True)
class PluginInfo:
    path: Path  # resolved
    sha256: str
    module: str  # the name it was imported under (in sys.modules)
    variants: tuple[tuple[str, str], ...]  # (op, variant) pairs the file registered
    ops: tuple[str, ...] = ()  # the ops the file declared


# What this process has loaded: by resolved path, and which plugin owns each (op, variant) it
# registered.
_LOADED: dict[Path, PluginInfo] = {}
_OWNERS: dict[tuple[str, str], Path] = {}


@dataclass(frozen=True)
class _Saved:
    spec: OpSpec
    variants: dict[str, Callable[..., Any]]
    calls: OpCalls | None


def _snapshot() -> dict[str, _Saved]:
    return {op: _Saved(spec, dict(spec.variants), calls_of(op)) for op, spec in REGISTRY.items()}


def _restore(snapshot: dict[str, _Saved]) -> None:
    """The registry as the snapshot found it: the same ops in the same order, each with its variants
    and calls."""
    REGISTRY.clear()
    CALLS.clear()
    for op, saved in snapshot.items():
        saved.spec.variants.clear()
        saved.spec.variants.update(saved.variants)
        REGISTRY[op] = saved.spec
        if saved.calls is not None:
            CALLS[op] = (saved.spec, saved.calls)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# fusebench's top-level import names before it was one package, and theirs since.
_RENAMED = {"models": "fusebench.models", "bench": "fusebench"}


def _renamed_import(source: bytes) -> tuple[int, str] | None:
    """The line and old top-level name of a plugin's import from before fusebench was one package
    (`models` in `from models.ops import register`), or None. Read from the source, not from a
    failed import: run from a checkout's root, `models` would still import, as a second copy
    whose registry no run reads."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None  # the import reports it, with its line
    for node in ast.walk(tree):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level == 0
            else []
        )
        for name in names:
            if name.split(".")[0] in _RENAMED:
                return node.lineno, name.split(".")[0]
    return None


def _failing_line(err: BaseException, location: str) -> int | None:
    """The line of the plugin file where `err` happened: a syntax error's own line, else the deepest
    traceback frame that is in the plugin file."""
    if isinstance(err, SyntaxError) and err.filename == location and err.lineno:
        return err.lineno
    line = None
    tb: TracebackType | None = err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == location:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _message(err: BaseException) -> str:
    if isinstance(err, SyntaxError):
        return _one_line(err.msg)
    return _one_line(str(err)) or "(no message)"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _module_name(path: Path) -> str:
    stem = re.sub(r"\W", "_", path.stem) or "plugin"
    return f"fusebench_plugin_{stem}_{_sha256(str(path).encode())[:12]}"


def _still_registered(info: PluginInfo) -> bool:
    """Whether the plugin's module and every variant it registered are still in place (nobody
    removed them since), so that an unchanged file need not be imported again."""
    if info.module not in sys.modules or not all(op in REGISTRY for op in info.ops):
        return False
    return all(
        op in REGISTRY
        and variant in REGISTRY[op].variants
        and _OWNERS.get((op, variant)) == info.path
        for op, variant in info.variants
    )


def _variant_line(source: str, variant: str, fn: Callable[..., Any]) -> int:
    """The line that names the variant (its register call), else the function's first line, else
    1."""
    for number, text in enumerate(source.splitlines(), start=1):
        if f'"{variant}"' in text or f"'{variant}'" in text:
            return number
    code = getattr(fn, "__code__", None)
    return code.co_firstlineno if code is not None else 1


def load_plugin(path: Path | str) -> PluginInfo:
    """Import one plugin file by path; see the module docstring."""
    shown = str(path)
    resolved = Path(path).expanduser().resolve()
    try:
        data = resolved.read_bytes()
    except OSError as err:
        raise PluginError(
            f"{shown}: plugin: {type(err).__name__}: {_one_line(err.strerror or err)}"
        ) from err
    digest = _sha256(data)
    name = _module_name(resolved)

    previous = _LOADED.get(resolved)
    if previous is not None and previous.sha256 == digest and _still_registered(previous):
        return previous

    renamed = _renamed_import(data)
    if renamed:
        line, old = renamed
        raise PluginError(
            f"{shown}:{line}: plugin: `{old}` is `{_RENAMED[old]}` now (fusebench is one import "
            "package): write `from fusebench.models.ops import register`"
        )
    location = str(resolved)
    before = _snapshot()
    for op in previous.ops if previous is not None else ():
        REGISTRY.pop(op, None)  # a changed file declares its ops anew
    spec = importlib.util.spec_from_file_location(name, location)
    if spec is None or spec.loader is None:
        raise PluginError(f"{shown}: plugin: ImportError: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:
        sys.modules.pop(name, None)
        _restore(before)
        line = _failing_line(err, location)
        where = f"{shown}:{line}" if line else shown
        raise PluginError(f"{where}: plugin: {type(err).__name__}: {_message(err)}") from err

    declared = tuple(
        op for op, spec_ in REGISTRY.items() if op not in before or before[op].spec is not spec_
    )
    registered = []
    for op, spec_ in REGISTRY.items():
        had = before[op].variants if op in before else {}
        for variant, fn in spec_.variants.items():
            if had.get(variant) is fn:
                continue
            owner = _OWNERS.get((op, variant))
            if variant in had and owner != resolved:
                sys.modules.pop(name, None)
                _restore(before)
                by = f"plugin {owner}" if owner else "fusebench.models.ops"
                line = _variant_line(data.decode(errors="replace"), variant, fn)
                raise PluginError(
                    f"{shown}:{line}: plugin: ValueError: {op} variant {variant!r} "
                    f"is already registered by {by}; register it under a new name"
                )
            registered.append((op, variant))

    # A changed file that no longer registers a variant it registered before takes that variant
    # away.
    if previous is not None:
        for op, variant in previous.variants:
            if (op, variant) not in registered and _OWNERS.get((op, variant)) == resolved:
                if op in REGISTRY:
                    REGISTRY[op].variants.pop(variant, None)
                _OWNERS.pop((op, variant), None)

    for key in registered:
        _OWNERS[key] = resolved
    info = PluginInfo(resolved, digest, name, tuple(registered), declared)
    _LOADED[resolved] = info
    return info


def load_plugins(paths: Sequence[Path | str]) -> list[PluginInfo]:
    """Import every plugin file in order; the first that fails raises `PluginError` (those before it
    stay loaded)."""
    return [load_plugin(path) for path in paths]


def bind_experiment(exp: Experiment, extra: Sequence[Path | str] = ()) -> Experiment:
    """The experiment ready to run: its plugins (and `extra` ones, e.g. from --plugin) loaded, then
    every variant's op names checked against the registry they complete, and omitted ops filled in
    with their defaults."""
    plugins = tuple(dict.fromkeys([*exp.plugins, *(str(Path(path).resolve()) for path in extra)]))
    load_plugins(plugins)
    return resolve_ops(replace(exp, plugins=plugins), op_choices())
