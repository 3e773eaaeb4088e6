"""Any mlx-lm model, as mlx-lm ships it, with its ops switched in place.

The model is mlx-lm's own (its loader, its classes, its code); what fusebench switches is the names
its code calls its fusable helpers through (fusebench.models.sites). While the model runs, each
site's name is bound to a dispatcher that calls the variant the op table holds now; when the call
returns, the name is bound back, so nothing outside a forward pass ever sees a switched name, and
the model's modules are left as mlx-lm wrote them. The op table is the one fusebench's Gemma decoder
uses, so switching variants, the shares tracer and the correctness gate work the same on both.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

from .config import ConfigView
from .errors import UnknownOpError
from .ops import OpTable
from .registry import REGISTRY
from .sites import Site, sites_by_op


@dataclass(frozen=True)
class Binding:
    """One site found in one model: the module whose name is switched, and what it was bound to."""

    site: Site
    module: str
    original: Any

    @property
    def where(self) -> str:
        return f"{self.module}.{self.site.name}"

    def bind(self, function: Any) -> None:
        owner, attribute = _owner(self.module, self.site.name)
        setattr(owner, attribute, function)


def _owner(module: str, name: str) -> tuple[Any, str]:
    """Where a site's name lives: a module's global, or with a dotted name (`MLP.__call__`) an
    attribute of one of its classes."""
    owner: Any = importlib.import_module(module)
    *path, attribute = name.split(".")
    for part in path:
        owner = getattr(owner, part, None)
    return owner, attribute


def _model_modules(model: nn.Module) -> list[str]:
    """The modules defining the model's layers' classes, e.g. mlx_lm.models.qwen3 and, for its MoE
    layers, mlx_lm.models.switch_layers."""
    names = [type(model).__module__] + [type(m).__module__ for m in model.modules()]
    return [name for name in dict.fromkeys(names) if name.startswith("mlx_lm.")]


def find_bindings(model: nn.Module) -> list[Binding]:
    """Every declared site that the model's code can reach: a name its modules bind, or a named
    module's (mx.fast)."""
    found = []
    for sites in sites_by_op().values():
        for site in sites:
            modules = [site.module] if site.module else _model_modules(model)
            for module in modules:
                owner, attribute = _owner(module, site.name)
                bound = getattr(owner, attribute, None)
                if callable(bound):
                    found.append(Binding(site, module, bound))
    return found


class SwitchedModel:
    """An mlx-lm model whose op sites call the op table's variants: mlx-lm's model protocol
    (`model(tokens, cache=...)`, `make_cache()`, `layers`), plus `set_ops` as fusebench's
    decoder has it."""

    def __init__(self, model: nn.Module, config: ConfigView) -> None:
        self.model = model
        self.config = dict(config)
        self.model_type = str(config.get("model_type", ""))
        self.op_table = OpTable()
        self.bindings = find_bindings(model)
        self._counts: Counter[str] | None = None

    def __call__(self, inputs: mx.array, cache: list | None = None, **kwargs: Any) -> mx.array:
        with self.switched():
            return self.model(inputs, cache=cache, **kwargs)

    @contextmanager
    def switched(self) -> Iterator[None]:
        """Every site's name bound to its dispatcher, and bound back afterwards, whatever
        happens."""
        for binding in self.bindings:
            binding.bind(self._call(binding))
        try:
            yield
        finally:
            for binding in self.bindings:
                binding.bind(binding.original)

    def _call(self, binding: Binding) -> Any:
        table, op = self.op_table, binding.site.op

        def dispatch(*args: Any, **kwargs: Any) -> Any:
            if self._counts is not None:
                self._counts[binding.where] += 1
            return binding.site.adapt(getattr(table, op), binding.original, *args, **kwargs)

        return dispatch

    @contextmanager
    def counting(self) -> Iterator[Counter[str]]:
        """The calls through each site (by Binding.where) while the block runs."""
        self._counts = Counter()
        try:
            yield self._counts
        finally:
            self._counts = None

    def count_calls(self, tokens: mx.array) -> Counter[str]:
        """How many calls go through each site in one forward pass of `tokens` (lazy: the graph is
        built, not evaluated)."""
        with self.counting() as counts:
            self(tokens, cache=self.make_cache())
        return counts

    @property
    def vocab_size(self) -> int:
        return int(self.model.args.vocab_size)

    @property
    def ops(self) -> dict[str, str]:
        return dict(self.op_table.assignment)

    def set_ops(self, ops: Mapping[str, str]) -> None:
        self.op_table.set(ops)

    @property
    def layers(self) -> list[nn.Module]:
        return list(self.model.layers)

    def make_cache(self) -> list:
        return make_prompt_cache(self.model)

    def parameters(self) -> dict[str, Any]:
        return self.model.parameters()


class _TableModel(Protocol):
    """Either kind of model: fusebench's decoder and SwitchedModel both call their ops through an
    op table."""

    op_table: OpTable
    model_type: str

    def __call__(self, inputs: mx.array, cache: list | None = None) -> mx.array: ...

    def make_cache(self) -> list: ...


def called_ops(model: _TableModel, tokens: mx.array) -> list[str]:
    """The ops a forward pass of `tokens` calls, in declaration order. The op table's entries are
    wrapped while the graph is built; nothing is evaluated, so lazy weights do."""
    table, called = model.op_table, set()
    held = {op: getattr(table, op) for op in REGISTRY if hasattr(table, op)}

    def counting(op: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            called.add(op)
            return fn(*args, **kwargs)

        return call

    for op, fn in held.items():
        setattr(table, op, counting(op, fn))
    try:
        model(tokens, cache=model.make_cache())
    finally:
        for op, fn in held.items():
            setattr(table, op, fn)
    return [op for op in REGISTRY if op in called]


def varied_ops(variants: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The ops an experiment switches: those its variants do not all run alike."""
    ops = dict.fromkeys(op for assignment in variants.values() for op in assignment)
    return [op for op in ops if len({a.get(op) for a in variants.values()}) > 1]


def check_switched_ops(
    model: _TableModel, variants: Mapping[str, Mapping[str, str]], tokens: mx.array
) -> None:
    """An op the variants switch that the model never calls is an error naming the ops it does."""
    called = called_ops(model, tokens)
    missing = [op for op in varied_ops(variants) if op not in called]
    if missing:
        raise UnknownOpError(
            f"the variants switch {', '.join(missing)}, which {model.model_type} never calls; "
            f"its switchable ops are {', '.join(called) or 'none'}"
        )
