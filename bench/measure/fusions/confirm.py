"""`fusebench fusions --confirm N`: the top chains measured end to end, as a run measures a fusion.

Each of the first N chains (in the ranking's order) gets one op switched: the registered op whose
call makes it (fusebench's own decoder, or a site of an mlx-lm model) to its `compiled` variant;
else, in a model in mlx-lm's classes, the class whose call (of arrays alone) makes it, given an op
of its own (fusebench.models.module_calls.compile_call_op) in a plugin written beside the results.
An experiment comparing the model as it ran with each op switched is run by `fusebench run` in a
child process (its rounds, correctness gate, intervals and verdicts). The experiment and the plugin
stay: `fusebench run EXPERIMENT` measures the same again, and `--plugin` makes the ops usable in
any experiment.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fusebench.models.ops import REGISTRY

from ...analysis.fusions import FusionEstimate, VariantEstimate
from ...analysis.memory import phase_peaks
from ...analysis.stats import compare_table
from ...analysis.study import build_study
from ...core.errors import UserError
from ...core.experiment import ModelSpec
from ...core.flags import FLAGS_BUDGET_S_PER_MODEL, quick_experiment
from ...core.fusion import ConfirmRecord, FusionRecord
from ...core.results import read_results
from ..machine.env import child_command

METRICS = ("prefill", "gen")
BASELINE = "baseline"
COMPILED = "compiled"
SHAPELESS = "shapeless"  # a class's call under mx.compile(shapeless=True) (`fusions --shapeless`)
PLUGIN = "compiled_calls.py"


class ConfirmError(UserError):
    """The confirming run failed: its own message says why."""


@dataclass(frozen=True)
class Pick:
    """One op to switch in the confirming run: a registered op the chain's call goes through, to
    the variant expected to gain most (its `compiled`, or a plugin's that expects a gain), or the
    op the plugin declares for a class's call (`origin`), to its `compiled` or `shapeless`
    variant."""

    op: str  # "geglu", or "gemma3_text_mlp"
    candidates: tuple[str, ...]  # the model's chains its call makes
    origin: str = ""  # "mlx_lm.models.gemma3_text.MLP"; "": a registered op
    variant: str = COMPILED

    @property
    def module(self) -> str:
        return self.origin.rpartition(".")[0]

    @property
    def cls(self) -> str:
        return self.origin.rpartition(".")[2]

    @property
    def name(self) -> str:
        """The confirming variant's name in the experiment."""
        return f"{self.op}-{self.variant}"


def picks(
    found: Sequence[FusionEstimate],
    count: int,
    ops: Mapping[str, str],
    *,
    shapeless: bool = False,
    variants: Sequence[VariantEstimate] = (),
) -> tuple[list[Pick], list[str]]:
    """The first `count` ops to switch, in ranking order, and why the chains ranked above the last
    of them (all, where fewer were found) were passed over: one line a reason, its chains named.
    `ops`: the op variants the model ran with (the others at their defaults); `shapeless`: a
    class's call compiled as the chains were; `variants`: the ops' variants timed at their calls,
    of which a registered op switches to the one expected to gain most."""
    chosen: dict[tuple[str, str, str], list[str]] = {}
    passed: dict[str, list[str]] = {}
    class_variant = SHAPELESS if shapeless else COMPILED
    for estimate in found:
        record = estimate.record
        key = _switch(record, ops, variants, class_variant)
        if key in chosen:
            chosen[key].append(record.candidate)
        elif len(chosen) < count:
            if isinstance(key, str):
                passed.setdefault(key, []).append(record.candidate)
            else:
                chosen[key] = [record.candidate]
    found_picks = [
        Pick(op, tuple(c), origin, variant) for (op, origin, variant), c in chosen.items()
    ]
    return found_picks, [f"{', '.join(names)}: {why}" for why, names in passed.items()]


def _switch(
    record: FusionRecord,
    ops: Mapping[str, str],
    variants: Sequence[VariantEstimate],
    class_variant: str,
) -> tuple[str, str, str] | str:
    """(op, origin, variant) to switch the chain's call to, or why there is none."""
    spec = REGISTRY.get(record.op) if record.op else None
    running = ops.get(record.op, spec.default) if spec else ""
    if spec and (variant := _best_variant(record.op, running, spec.variants, variants)):
        return record.op, "", variant
    if record.compiled_by_model == "whole":
        return "the model's code compiles it already"
    if record.origin.startswith("mlx_lm."):
        return _op_name(record.origin), record.origin, class_variant
    if spec:
        choices = ", ".join(spec.variants)
        return (
            f"its op {record.op} runs {running}; no compiled variant, and none expected to gain "
            f"({choices})"
        )
    if not record.origin:
        return "no call of arrays alone makes it whole, none for mx.compile to wrap"
    return f"made by {record.origin} outside fusebench's ops, in its own decoder"


def _best_variant(
    op: str, running: str, registered: Sequence[str], timed: Sequence[VariantEstimate]
) -> str | None:
    """The variant of `op` to confirm: of its `compiled` and any other that expects a gain at its
    calls (a plugin's hand-written fusion), the one expected to gain most; `compiled` where none
    was timed; None where neither is there to switch to."""

    def gain(v: VariantEstimate) -> float:
        return max((e.delta_pct for e in v.expected.values()), default=0.0)

    eligible = [
        v
        for v in timed
        if v.op == op and v.variant != running and (v.variant == COMPILED or gain(v) > 0)
    ]
    if eligible:
        return max(eligible, key=gain).variant
    return COMPILED if COMPILED in registered and running != COMPILED else None


def _op_name(origin: str) -> str:
    module, _, cls = origin.rpartition(".")
    return re.sub(r"[^a-z0-9]+", "_", f"{module.rpartition('.')[2]}_{cls}".lower())


def plugin_text(chosen: Sequence[Pick]) -> str:
    lines = [
        '"""Made by `fusebench fusions --confirm`: each class\'s call as mlx-lm wrote it (`eager`)',
        'or under mx.compile (`compiled`, `shapeless`), one op each."""',
        "",
        "from fusebench.models.ops import compile_call_op",
        "",
    ]
    lines += [f'compile_call_op("{p.op}", "{p.module}", "{p.cls}")' for p in chosen if p.origin]
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
    folder: Path,
    model: ModelSpec,
    ops: Mapping[str, str],
    chosen: Sequence[Pick],
    tokens: tuple[int, int],
    user_plugins: Sequence[str] = (),
) -> Path:
    """The experiment, and the plugin where a class's call is compiled, in `folder`; returns the
    experiment's path. The baseline runs the model as the search traced it (`ops`, with the user's
    plugins loaded)."""
    folder.mkdir(parents=True, exist_ok=True)
    plugins = list(user_plugins)
    if any(p.origin for p in chosen):
        (folder / PLUGIN).write_text(plugin_text(chosen))
        plugins.append(PLUGIN)
    variants = {BASELINE: dict(ops), **{p.name: {**ops, p.op: p.variant} for p in chosen}}
    text = quick_experiment(
        [model_entry(model)],
        variants,
        "compiled-calls",
        *tokens,
        plugins=plugins,
        budget_s=FLAGS_BUDGET_S_PER_MODEL * len(chosen),
        description="made by fusebench fusions --confirm: the model as it ran against each "
        "chain's op compiled",
    )
    path = folder / "experiment.yaml"
    path.write_text(text)
    return path


def run_confirmation(experiment: Path, out: Path, *, to_stderr: bool) -> None:
    """`fusebench run EXPERIMENT` in a child process of this build; its progress on our stdout, or
    on stderr where stdout carries an answer (JSON)."""
    import sys

    command = [*child_command("fusebench"), "run", str(experiment), "--out", str(out)]
    done = subprocess.run(
        [*command, *(["--quiet"] if to_stderr else [])],
        stdout=sys.stderr if to_stderr else None,
        check=False,
    )
    if done.returncode != 0:
        raise ConfirmError(
            f"fusions --confirm: the run of {experiment} ended with exit {done.returncode}"
        )


def _change(peaks: dict[tuple[str, str], float], variant: str, metric: str) -> float | None:
    new, old = peaks.get((variant, metric)), peaks.get((BASELINE, metric))
    return None if new is None or old is None else new - old


def measured(
    run_id: str, model: str, chosen: Sequence[Pick], results: Path, plugin: Path
) -> list[ConfirmRecord]:
    """Each class's measured Δ per metric, read from the confirming run's results."""
    study = build_study(read_results([results]))
    if study.timed.empty:
        reasons = "; ".join(dict.fromkeys(str(r) for r in study.closed.get("reason", [])))
        raise ConfirmError(f"fusions --confirm: {results} holds no timed trial ({reasons})")
    pairs = [(BASELINE, p.name) for p in chosen]
    rows = compare_table(study.timed, pairs, list(METRICS), margin_pct=study.margin_pct)
    peaks = {(p.variant, p.metric): p.bytes for p in phase_peaks(study.timed)}
    found = []
    for pick in chosen:
        for row in rows[(BASELINE, pick.name)]:
            found.append(
                ConfirmRecord(
                    run_id=run_id,
                    model=model,
                    origin=pick.origin,
                    op=pick.op,
                    variant=pick.variant,
                    candidates=pick.candidates,
                    metric=row.metric,
                    delta_pct=row.delta_pct,
                    low_pct=100 * (row.adj_low - 1),
                    high_pct=100 * (row.adj_high - 1),
                    verdict=str(row.verdict.word) if row.verdict else "",
                    rounds=row.n_pairs,
                    results=str(results),
                    plugin=str(plugin) if pick.origin else "",
                    peak_change_bytes=_change(peaks, pick.name, row.metric),
                )
            )
    return found
