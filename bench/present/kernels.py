"""Kernel truth: which kernel each variant really ran (`kind: "kernel"` records, from
`fusebench kernels` and from every run, read back as `core.cell.KernelFact`), as a table and as
the plain sentence that goes beside a comparison whose arms ran the same kind of kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.cell import KernelFact, SiteCalls
from ..core.text import join_words
from .document import Table

KERNEL_COLUMNS = ("Op", "Variant", "Shape", "Status", "Kernels", "Reason")
GRAPH_PROBE = "graph"  # the lazy graph's kernel count, which every variant of every op gets


def kernel_table(facts: Sequence[KernelFact]) -> Table:
    """One row per op × variant × shape: fused, fallback (with MLX's reason), or how many kernels
    its graph holds."""
    rows = tuple(
        (f.op, f.variant, f.shape_label, f.status, _count(f.kernels), f.reason or "") for f in facts
    )
    return Table(KERNEL_COLUMNS, rows, frozenset({4}))


def graph_facts(facts: Sequence[KernelFact]) -> list[KernelFact]:
    return [f for f in facts if f.probe == GRAPH_PROBE]


def _span(facts: Sequence[KernelFact]) -> str:
    head_dims = sorted({f.head_dim for f in facts if f.head_dim is not None})
    phases = [p for p in ("prefill", "decode") if any(f.phase == p for f in facts)]
    return f"head_dim {join_words(head_dims)}, {join_words(phases)}"


def compile_note(facts: Sequence[KernelFact]) -> str | None:
    """Why a compiled variant can be several fused kernels, said where the table shows one that
    is."""
    split = sorted(
        {
            f"{f.op} {f.variant}"
            for f in graph_facts(facts)
            if len(f.fused) > 1 and len(f.fused) == f.kernels
        }
    )
    if not split:
        return None
    return (
        f"{', '.join(split)}: several fused kernels, not one. mx.compile fuses a chain of "
        "elementwise ops only up to a depth of 11 (MLX's max_compile_depth), "
        "and under shapeless=True every scalar constant adds two broadcasts to the chain; "
        "the rest goes into another fused kernel."
    )


def _count(value: int | None) -> str:
    return "—" if value is None else str(value)


def probe_facts(facts: Sequence[KernelFact], op: str | None = None) -> list[KernelFact]:
    """The facts of ops' fused-kernel probes (every probe but the graph's), of one op or all."""
    return [f for f in facts if f.probe != GRAPH_PROBE and op in (None, f.op)]


def summarize_probes(facts: Sequence[KernelFact]) -> str:
    """One plain sentence per probed variant and backend on whether it got a fused kernel, for
    beside a result that switches to it."""
    probes = probe_facts(facts)
    if not probes:
        return "no fused-kernel probe was recorded"
    sentences = []
    for key in dict.fromkeys((f.backend or "?", f.op, f.variant) for f in probes):
        mine = [f for f in probes if (f.backend or "?", f.op, f.variant) == key]
        sentences.append(_probe_sentence(*key, mine))
    return "; ".join(sentences)


def _probe_sentence(backend: str, op: str, variant: str, mine: Sequence[KernelFact]) -> str:
    fused = [f for f in mine if f.status == "fused"]
    fallen = [f for f in mine if f.status != "fused"]
    who = f"on {backend} `{variant}`"
    if not fallen:
        return f"{who} ran a fused kernel for every {op} shape ({_span(mine)})"
    if not fused:
        reasons = list(dict.fromkeys(f.reason.rstrip(".") for f in fallen))
        return (
            f"{who} fell back to composed ops for every {op} shape "
            f"({_span(mine)}): MLX says: {'; '.join(reasons)}"
        )
    fused_part = f"ran a fused kernel for {join_words([f.shape_label for f in fused])}"
    fell = "; ".join(f"{f.shape_label} (MLX says: {f.reason.rstrip('.')})" for f in fallen)
    return f"{who} {fused_part}, and fell back to composed ops for {fell}"


def switched_sentence(sites: Sequence[SiteCalls]) -> str:
    """Which names an mlx-lm model's ops were switched at, with the calls through each."""
    parts = [
        f"{s.op} at {s.site} ({s.prefill_calls} calls a prefill, {s.decode_calls} a decode step)"
        for s in sites
    ]
    return f"Switched in mlx-lm's model: {join_words(parts)}."
