"""`fusebench fusions --confirm N`: the top chains measured end to end, as a run measures a fusion.

Each of the first N classes (in the ranking's order) whose call makes a chain no op switches, in a
model that runs in mlx-lm's classes, gets an op of its own: that class's call as written, or under
mx.compile (fusebench.models.module_calls.compile_call_op). The ops are declared in a plugin written
beside the results, and an experiment comparing the model as written with each class compiled is run
by `fusebench run` in a child process (its rounds, correctness gate, intervals and verdicts). The
plugin and the experiment stay: `fusebench run EXPERIMENT` measures the same again, and `--plugin`
makes the ops usable in any experiment.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...analysis.fusions import FusionEstimate
from ...analysis.memory import phase_peaks
from ...analysis.stats import compare_table
from ...analysis.study import build_study
from ...core.errors import UserError
from ...core.fusion import ConfirmRecord
from ...core.results import read_results
from ...core.spec import ModelSpec, quick_experiment
from ..machine.env import child_command, on_own_path

METRICS = ("prefill", "gen")
EAGER = "eager"


class ConfirmError(UserError):
    """The confirming run failed: its own message says why."""


@dataclass(frozen=True)
class Pick:
    """One class to compile, and the op its plugin declares for it."""

    origin: str  # "mlx_lm.models.gemma3_text.MLP"
    op: str  # "gemma3_text_mlp"
    candidates: tuple[str, ...]  # the model's chains its call makes

    @property
    def module(self) -> str:
        return self.origin.rpartition(".")[0]

    @property
    def cls(self) -> str:
        return self.origin.rpartition(".")[2]

    @property
    def variant(self) -> str:
        return f"{self.op}-compiled"


def picks(found: Sequence[FusionEstimate], count: int) -> tuple[list[Pick], list[str]]:
    """The first `count` classes to compile, in ranking order, and why others were passed over."""
    chosen: dict[str, list[str]] = {}
    passed: list[str] = []
    for estimate in found:
        record = estimate.record
        origin = record.origin
        if origin in chosen:
            chosen[origin].append(record.candidate)
            continue
        if len(chosen) == count:
            continue
        if not origin:
            passed.append(
                f"{record.candidate} ({record.where}): no call of arrays alone makes it whole, "
                "none for mx.compile to wrap"
            )
        elif not origin.startswith("mlx_lm."):
            passed.append(
                f"{record.candidate}: made by {origin}, fusebench's own decoder, whose ops its "
                "variants switch (fusebench run --op OP=...)"
            )
        elif record.compiled_by_model == "whole":
            passed.append(f"{record.candidate}: the model's code compiles it already")
        else:
            chosen[origin] = [record.candidate]
    return [Pick(origin, _op_name(origin), tuple(c)) for origin, c in chosen.items()], passed


def _op_name(origin: str) -> str:
    module, _, cls = origin.rpartition(".")
    return re.sub(r"[^a-z0-9]+", "_", f"{module.rpartition('.')[2]}_{cls}".lower())


def plugin_text(chosen: Sequence[Pick]) -> str:
    lines = [
        '"""Made by `fusebench fusions --confirm`: each class\'s call as mlx-lm wrote it (`eager`)',
        'or under mx.compile (`compiled`), one op each."""',
        "",
        "from fusebench.models.ops import compile_call_op",
        "",
    ]
    lines += [f'compile_call_op("{p.op}", "{p.module}", "{p.cls}")' for p in chosen]
    return "\n".join(lines) + "\n"


def model_entry(model: ModelSpec) -> dict[str, object]:
    """The model as an experiment names it."""
    if model.preset is not None:
        entry: dict[str, object] = {"preset": model.preset}
    elif model.repo is not None:
        entry = {"repo": model.repo}
    else:
        entry = {"path": str(model.path)}
    if model.layers is not None:
        entry["layers"] = model.layers
    entry["dtype"] = model.dtype
    if model.implementation:
        entry["implementation"] = model.implementation
    return entry


def write_confirmation(
    folder: Path, model: ModelSpec, chosen: Sequence[Pick], prompt_tokens: int, gen_tokens: int
) -> Path:
    """The plugin and the experiment, in `folder`; returns the experiment's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "compiled_calls.py").write_text(plugin_text(chosen))
    variants = {EAGER: {}, **{p.variant: {p.op: "compiled"} for p in chosen}}
    text = quick_experiment(
        [model_entry(model)],
        variants,
        "compiled-calls",
        prompt_tokens,
        gen_tokens,
        plugins=["compiled_calls.py"],
        description="made by fusebench fusions --confirm: the model as written against each "
        "class's call compiled",
    )
    path = folder / "experiment.yaml"
    path.write_text(text)
    return path


def run_confirmation(experiment: Path, out: Path, *, to_stderr: bool) -> None:
    """`fusebench run EXPERIMENT` in a child process of this build; its progress on our stdout, or
    on stderr where stdout carries an answer (JSON)."""
    import os
    import sys

    command = [*child_command("fusebench"), "run", str(experiment), "--out", str(out)]
    done = subprocess.run(
        [*command, *(["--quiet"] if to_stderr else [])],
        env=on_own_path(os.environ),
        stdout=sys.stderr if to_stderr else None,
        check=False,
    )
    if done.returncode != 0:
        raise ConfirmError(
            f"fusions --confirm: the run of {experiment} ended with exit {done.returncode}"
        )


def _change(peaks: dict[tuple[str, str], float], variant: str, metric: str) -> float | None:
    new, old = peaks.get((variant, metric)), peaks.get((EAGER, metric))
    return None if new is None or old is None else new - old


def measured(
    run_id: str, model: str, chosen: Sequence[Pick], results: Path, plugin: Path
) -> list[ConfirmRecord]:
    """Each class's measured Δ per metric, read from the confirming run's results."""
    study = build_study(read_results([results]))
    if study.timed.empty:
        reasons = "; ".join(dict.fromkeys(str(r) for r in study.closed.get("reason", [])))
        raise ConfirmError(f"fusions --confirm: {results} holds no timed trial ({reasons})")
    pairs = [(EAGER, p.variant) for p in chosen]
    rows = compare_table(study.timed, pairs, list(METRICS), margin_pct=study.margin_pct)
    peaks = {(p.variant, p.metric): p.bytes for p in phase_peaks(study.timed)}
    found = []
    for pick in chosen:
        for row in rows[(EAGER, pick.variant)]:
            found.append(
                ConfirmRecord(
                    run_id=run_id,
                    model=model,
                    origin=pick.origin,
                    op=pick.op,
                    candidates=pick.candidates,
                    metric=row.metric,
                    delta_pct=row.delta_pct,
                    low_pct=100 * (row.adj_low - 1),
                    high_pct=100 * (row.adj_high - 1),
                    verdict=str(row.verdict.word) if row.verdict else "",
                    rounds=row.n_pairs,
                    results=str(results),
                    plugin=str(plugin),
                    peak_change_bytes=_change(peaks, pick.variant, row.metric),
                )
            )
    return found
