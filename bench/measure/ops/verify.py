"""`fusebench verify`: every combination of the variants of the ops a model calls against the
all-reference assignment, on the same weights and prompt. A fusion that is fast but wrong fails here
before anyone times it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from fusebench.models.loading import load_model
from fusebench.models.ops import REGISTRY, reference_assignment
from fusebench.models.switched import called_ops

from ...core.cell import Agreement
from ..job import ATOL_BY_DTYPE
from ..worker import agreements, make_prompt


@dataclass
class VerifyOptions:
    model: str = "tiny"
    layers: int | None = None
    dtype: str = "float32"
    quantize: str | None = None
    seed: int = 0
    prompt_tokens: int = 24
    tokens: int = 16
    atol: float | None = None
    implementation: str | None = None


@dataclass
class Verified:
    """The ops the model calls, whose combinations were checked, and each combination's
    agreement."""

    ops: list[str]
    agreements: list[Agreement]


def all_assignments(ops: list[str]) -> dict[str, dict[str, str]]:
    """Every combination of the registered variants of `ops`, the other ops at their reference,
    named by what differs from the reference."""
    reference = reference_assignment()
    combos = itertools.product(*(REGISTRY[op].variants for op in ops))
    named = {}
    for combo in combos:
        assignment = {**reference, **dict(zip(ops, combo, strict=True))}
        changed = [f"{op}={v}" for op, v in assignment.items() if v != reference[op]]
        named[", ".join(changed) or "reference"] = assignment
    return named


def verify(options: VerifyOptions) -> Verified:
    model = load_model(
        options.model,
        layers=options.layers,
        dtype=options.dtype,
        quantize=options.quantize,
        seed=options.seed,
        implementation=options.implementation,
    )
    prompt = make_prompt(model.vocab_size, 1, options.prompt_tokens, options.seed, 0)
    atol = options.atol if options.atol is not None else ATOL_BY_DTYPE[options.dtype]
    ops = called_ops(model, prompt)
    found = agreements(
        model,
        all_assignments(ops),
        "reference",
        prompt,
        atol,
        options.tokens,
        step=max(1, options.prompt_tokens // 3),
    )
    return Verified(ops, found)


def verify_table(found: list[Agreement], ops: list[str], title: str) -> Table:
    """One row per combination, one column per op, so the variant that breaks a row is plain to
    see."""
    assignments = all_assignments(ops)
    table = Table(title=title)
    for op in ops:
        table.add_column(op)
    for column in ("max |Δ|", "max rel", "greedy agree", "verdict"):
        table.add_column(column, justify="right")
    for a in found:
        table.add_row(
            *(assignments[a.variant][op] for op in ops),
            f"{a.max_abs_err:.2e}",
            f"{a.max_rel_err:.2e}",
            f"{a.tokens_agree}/{a.tokens_checked}",
            "[green]ok[/]" if a.passed else "[red]FAIL[/]",
        )
    return table


def run_verify(options: VerifyOptions, console: Console) -> int:
    verified = verify(options)
    found = verified.agreements
    title = f"fusebench verify: {options.model}" + (
        f" ({options.layers} layers)" if options.layers else ""
    )
    console.print(
        verify_table(
            found, verified.ops, f"{title}, {options.dtype}, tolerance {found[0].atol:.0e}"
        )
    )
    failed = [a.variant for a in found if not a.passed]
    if failed:
        console.print(f"[red]{len(failed)} of {len(found)} combinations are outside tolerance[/]")
        return 1
    console.print(f"all {len(found)} combinations agree with the reference")
    return 0
