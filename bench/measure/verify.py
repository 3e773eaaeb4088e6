"""`fusebench verify`: every combination of op variants against the all-reference assignment, on the
same weights and prompt. A fusion that is fast but wrong fails here before anyone times it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from models.loading import load_model
from models.ops import REGISTRY, reference_assignment

from .job import Agreement
from .worker import ATOL_BY_DTYPE, agreements, make_prompt


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


def all_assignments() -> dict[str, dict[str, str]]:
    """Every combination of registered variants, named by what differs from the reference."""
    reference = reference_assignment()
    ops = list(REGISTRY)
    combos = itertools.product(*(REGISTRY[op].variants for op in ops))
    named = {}
    for combo in combos:
        assignment = dict(zip(ops, combo, strict=True))
        changed = [f"{op}={v}" for op, v in assignment.items() if v != reference[op]]
        named[", ".join(changed) or "reference"] = assignment
    return named


def verify(options: VerifyOptions) -> list[Agreement]:
    model = load_model(
        options.model,
        layers=options.layers,
        dtype=options.dtype,
        quantize=options.quantize,
        seed=options.seed,
    )
    prompt = make_prompt(model.args.vocab_size, 1, options.prompt_tokens, options.seed, 0)
    atol = options.atol if options.atol is not None else ATOL_BY_DTYPE[options.dtype]
    return agreements(
        model,
        all_assignments(),
        "reference",
        prompt,
        atol,
        options.tokens,
        step=max(1, options.prompt_tokens // 3),
    )


def verify_table(found: list[Agreement], title: str) -> Table:
    """One row per combination, one column per op, so the variant that breaks a row is plain to
    see."""
    assignments = all_assignments()
    table = Table(title=title)
    for op in REGISTRY:
        table.add_column(op)
    for column in ("max |Δ|", "max rel", "greedy agree", "verdict"):
        table.add_column(column, justify="right")
    for a in found:
        table.add_row(
            *assignments[a.variant].values(),
            f"{a.max_abs_err:.2e}",
            f"{a.max_rel_err:.2e}",
            f"{a.tokens_agree}/{a.tokens_checked}",
            "[green]ok[/]" if a.passed else "[red]FAIL[/]",
        )
    return table


def run_verify(options: VerifyOptions, console: Console) -> int:
    found = verify(options)
    title = f"fusebench verify: {options.model}" + (
        f" ({options.layers} layers)" if options.layers else ""
    )
    console.print(verify_table(found, f"{title}, {options.dtype}, tolerance {found[0].atol:.0e}"))
    failed = [a.variant for a in found if not a.passed]
    if failed:
        console.print(f"[red]{len(failed)} of {len(found)} combinations are outside tolerance[/]")
        return 1
    console.print(f"all {len(found)} combinations agree with the reference")
    return 0
