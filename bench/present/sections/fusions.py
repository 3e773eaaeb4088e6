"""`fusebench fusions`: a model's fusible chains, ranked by the tok/s Δ fusing each would give."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...analysis.amdahl import Amdahl
from ...analysis.fusions import FusionEstimate, VariantEstimate
from ...core.fusion import ConfirmRecord, ReplayRecord
from ..document import Block, Bullets, Heading, Paragraph, Table
from ..format import format_bytes, op_verdict_text
from . import ReportContext

COLUMNS = (
    "#",
    "Chain",
    "Where",
    "Per step p/d",
    "Saves",
    "Share p/g",
    "Compiled Δ [95% CI]",
    "Verdict",
    "Expected Δ prefill",
    "Expected Δ gen",
    "Measured Δ p / g",
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
    "(95% interval, widened by the op shares' in-model error); ranked by its size either way. "
    "Share p/g: the eager chain's time, times the count, in the prefill and the decode step (the "
    "most any fusion of it could save). Saves: intermediates a fused kernel would neither write "
    "nor read back, per occurrence."
)


def fusions_section(context: ReportContext) -> list[Block]:
    """`fusebench fusions` records: every model's chains, all of them, ranked."""
    study = context.study
    if not study.fusions:
        return []
    blocks: list[Block] = [Heading("Which fusion to write")]
    for model in dict.fromkeys(e.record.model for e in study.fusions):
        found = [e for e in study.fusions if e.record.model == model]
        replays = [r for r in study.replays if r.model == model]
        blocks += fusion_blocks(model, found, replays)
        blocks += variant_blocks([v for v in study.fusion_variants if v.model == model])
    return blocks


VARIANT_COLUMNS = ("Op", "Variant", "Against", "Rounds", "Expected Δ prefill", "Expected Δ gen")


def variant_blocks(found: Sequence[VariantEstimate]) -> list[Block]:
    """Every variant of the chains' ops (a plugin's too) at those ops' calls in the step: what
    switching to it would give, beside the chains above."""
    if not found:
        return []
    rows = tuple(
        (
            v.op,
            v.variant,
            v.running,
            str(v.rounds),
            _expected(v.expected.get("prefill")),
            _expected(v.expected.get("gen")),
        )
        for v in found
    )
    return [
        Heading("The chains' ops, each variant at their calls", 4),
        Table(VARIANT_COLUMNS, rows, frozenset({3, 4, 5})),
        Paragraph(
            "Each registered variant of an op whose call makes a chain above (a plugin's among "
            "them, `--plugin FILE`), timed at that op's computed calls in the step as the op "
            "shares time them, against the variant the model ran: the tok/s Δ switching to it "
            "would give, by the same arithmetic as the chains'."
        ),
    ]


def fusion_blocks(
    model: str,
    found: Sequence[FusionEstimate],
    replays: Sequence[ReplayRecord],
    top: int | None = None,
) -> list[Block]:
    """One model's table, ranked, its first `top` rows (None: all), with what the replay says of
    its trace."""
    shown = found if top is None else found[:top]
    rows = tuple(_row(rank, e) for rank, e in enumerate(shown, start=1))
    blocks: list[Block] = [
        Heading(f"Fusible chains of {model}", 3),
        Table(COLUMNS, rows, frozenset({0, 3, 4, 5, 6, 8, 9, 10})),
        Paragraph(
            EXPLAINED.replace("chain compiled", "chain compiled with mx.compile(shapeless=True)")
            if any(e.record.shapeless for e in found)
            else EXPLAINED
        ),
    ]
    notes = [*_confirm_notes(found), *(_replay_note(r) for r in replays)]
    if len(shown) < len(found):
        rest = found[len(shown) :]
        largest = max(abs(e.largest_pct) for e in rest)
        notes.insert(
            0,
            f"{len(rest)} more chains, each expected to change tok/s by at most "
            f"{largest:.2f}%: --top 0 lists them all",
        )
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
        "/".join(_share(e.share_pct.get(metric)) for metric in ("prefill", "gen")),
        "—" if speed is None else _interval(speed.delta_pct, speed.low_pct, speed.high_pct),
        "—" if e.speed is None else op_verdict_text(e.speed),
        _expected(e.expected.get("prefill")),
        _expected(e.expected.get("gen")),
        " / ".join(_measured(e.measured.get(metric)) for metric in ("prefill", "gen"))
        if e.measured
        else "",
        IN_MODEL[r.compiled_by_model],
    )


def _measured(found: ConfirmRecord | None) -> str:
    return "—" if found is None else f"{found.delta_pct:+.1f}% {found.verdict}"


def _peak(record: ConfirmRecord) -> str:
    change = record.peak_change_bytes
    if change is None:
        return ""
    if int(change) == 0:
        return ", peak unchanged"
    sign = "-" if change < 0 else "+"
    return f", peak {sign}{format_bytes(int(abs(change)))}"


def _confirm_notes(found: Sequence[FusionEstimate]) -> list[str]:
    """One line per class measured end to end: its interval, rounds and where to measure again."""
    seen: dict[str, list[ConfirmRecord]] = {}
    for e in found:
        for record in e.measured.values():
            if record not in seen.setdefault(record.op, []):
                seen[record.op].append(record)
    notes = []
    for records in seen.values():
        first = records[0]
        figures = "; ".join(
            f"{r.metric} {_interval(r.delta_pct, r.low_pct, r.high_pct)} {r.verdict}{_peak(r)}"
            for r in records
        )
        what = f"{first.origin}'s call (op {first.op})" if first.origin else first.op
        reuse = f"; --plugin {first.plugin} makes the op usable anywhere" if first.plugin else ""
        notes.append(
            f"measured: {what} at {first.variant} ({', '.join(first.candidates)}): {figures}, "
            f"{first.rounds} rounds, Holm-adjusted 95% CI, in {first.results}{reuse}"
        )
    return notes


def _share(pct: float | None) -> str:
    return "—" if pct is None else f"{pct:.2f}%"


def _chain(chain: str) -> str:
    names = chain.split(" -> ")
    if len(names) <= CHAIN_SHOWN:
        return "→".join(names)
    return "→".join(names[: CHAIN_SHOWN - 1]) + f"→… ({len(names)} ops)"


def _interval(delta: float, low: float, high: float, digits: int = 1) -> str:
    def pct(value: float) -> str:
        return f"{0.0 if round(value, digits) == 0 else value:+.{digits}f}"

    if math.isinf(high) or math.isinf(low):
        return f"{pct(delta)}% [unbounded]"
    return f"{pct(delta)}% [{pct(low)}, {pct(high)}]"


def _expected(found: Amdahl | None) -> str:
    """Two decimals: most chains move a step by hundredths of a percent."""
    if found is None:
        return "—"
    return _interval(found.delta_pct, found.low_pct, found.high_pct, digits=2)


def _replay_note(r: ReplayRecord) -> str:
    if r.missing:
        lacking = ", ".join(r.missing)
        return f"{r.phase} call ({r.primitives} primitives) not replayed: no rule for {lacking}"
    return (
        f"{r.phase} call ({r.primitives} primitives) replayed from its trace: max abs error "
        f"{r.max_abs_err:.2g} against the model's own call"
    )
