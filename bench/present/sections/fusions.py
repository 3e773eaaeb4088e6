"""`fusebench fusions`: a model's fusible chains, ranked by the tok/s Δ fusing each would give."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...analysis.fusions import FusionEstimate
from ...analysis.shares import Amdahl
from ...core.fusion import ReplayRecord
from ..document import Block, Bullets, Heading, Paragraph, Table
from ..format import format_bytes, op_verdict_text, signed_pct

COLUMNS = (
    "#",
    "Chain",
    "Where",
    "Per step p/d",
    "Saves",
    "Compiled Δ [95% CI]",
    "Verdict",
    "Expected Δ prefill",
    "Expected Δ gen",
    "In the model",
)
# A chain of more primitives than this is shown by its first ones and its length (its record holds
# it whole).
CHAIN_SHOWN = 4
IN_MODEL = {"whole": "already compiled", "part": "partly compiled", "no": ""}
EXPLAINED = (
    "Each chain is a maximal group of primitives mx.compile fuses here, found in MLX's trace of "
    "one prefill and one decode step, identical groups counted once with their count per step. "
    "Compiled: Δ speed is the chain compiled against the same chain eager, timed alone at its "
    "exact shapes on the step's own values, paired ABBA rounds, Holm-adjusted 95% CI over the "
    "model's chains. Expected Δ is what that saving, times the count, does to the measured step "
    "(95% interval, widened by the op shares' in-model error). Bytes saved: intermediates a fused "
    "kernel would neither write nor read back, per occurrence."
)


def fusion_blocks(
    model: str, found: Sequence[FusionEstimate], replays: Sequence[ReplayRecord]
) -> list[Block]:
    """One model's table, ranked, with what the replay says of its trace."""
    rows = tuple(_row(rank, e) for rank, e in enumerate(found, start=1))
    blocks: list[Block] = [
        Heading(f"Fusible chains of {model}", 3),
        Table(COLUMNS, rows, frozenset({0, 3, 4, 5, 7, 8})),
        Paragraph(EXPLAINED),
    ]
    notes = [_replay_note(r) for r in replays]
    random = [e.record.candidate for e in found if e.record.inputs_from == "random"]
    if random:
        notes.append(
            f"timed on random inputs (their step could not be replayed): {', '.join(random)}"
        )
    unfused = [e.record.candidate for e in found if e.record.kernels == 0]
    if unfused:
        notes.append(f"mx.compile made no fused kernel of: {', '.join(unfused)}")
    return [*blocks, Bullets(tuple(notes))]


def _row(rank: int, e: FusionEstimate) -> tuple[str, ...]:
    r = e.record
    speed = e.speed.speed if e.speed is not None else None
    return (
        str(rank),
        f"{r.candidate} {_chain(r.chain)}",
        r.where,
        f"{r.calls.get('prefill', 0)}/{r.calls.get('decode', 0)}",
        format_bytes(r.bytes_saved),
        "—" if speed is None else _interval(speed.delta_pct, speed.low_pct, speed.high_pct),
        "—" if e.speed is None else op_verdict_text(e.speed),
        _expected(e.expected.get("prefill")),
        _expected(e.expected.get("gen")),
        IN_MODEL[r.compiled_by_model],
    )


def _chain(chain: str) -> str:
    names = chain.split(" -> ")
    if len(names) <= CHAIN_SHOWN:
        return "→".join(names)
    return "→".join(names[: CHAIN_SHOWN - 1]) + f"→… ({len(names)} ops)"


def _interval(delta: float, low: float, high: float) -> str:
    if math.isinf(high) or math.isinf(low):
        return f"{signed_pct(delta)} [unbounded]"
    return f"{signed_pct(delta)} [{signed_pct(low)[:-1]}, {signed_pct(high)[:-1]}]"


def _expected(found: Amdahl | None) -> str:
    return "—" if found is None else _interval(found.delta_pct, found.low_pct, found.high_pct)


def _replay_note(r: ReplayRecord) -> str:
    if r.missing:
        lacking = ", ".join(r.missing)
        return f"{r.phase} call ({r.primitives} primitives) not replayed: no rule for {lacking}"
    return (
        f"{r.phase} call ({r.primitives} primitives) replayed from its trace: max abs error "
        f"{r.max_abs_err:.2g} against the model's own call"
    )
