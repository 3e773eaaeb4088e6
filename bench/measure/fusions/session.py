"""One `fusebench fusions` job: which models at which workload, and the records it writes."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from fusebench.models.config import preset_names
from fusebench.models.loading import WeightsCache, load_model
from fusebench.models.ops import REGISTRY

from ...analysis.fusions import (
    FUSION_OP,
    FusionEstimate,
    VariantEstimate,
    estimates,
    variant_estimates,
)
from ...analysis.opstats import summarize_ops
from ...core.errors import SpecError, UserError
from ...core.experiment import DEFAULT_PREFILL_STEP_SIZE, ModelSpec, model_spec
from ...core.fileformat import OpRecord, new_run_id
from ...core.fusion import FusionRecord, ReplayRecord, StepRecord, VariantRecord
from ...core.header import Env, StoredExperiment, run_header
from ...core.spec import load_experiment
from ..hub import found as hub_found
from ..hub import is_repo_id
from ..machine.env import weights_cache_dir
from .confirm import PLUGIN, measured, picks, run_confirmation, write_confirmation
from .search import FusionWorkload, find, time_candidates, time_op_variants, time_steps

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress


@dataclass(frozen=True)
class FusionTarget:
    """One model to search, with the workload and the op variants it runs."""

    model: ModelSpec
    workload: FusionWorkload
    ops: Mapping[str, str]


@dataclass(frozen=True)
class FusionJob:
    targets: Sequence[FusionTarget]
    rounds: int
    out: Path
    env: Env
    confirm: int = 0  # classes to compile and measure end to end, per model (`--confirm`)
    plugins: tuple[str, ...] = ()  # the user's (`--plugin`), which the confirming runs load too
    quiet: bool = False  # stdout carries the answer alone (JSON)
    # chains and classes' calls compiled with mx.compile(shapeless=True) (`--shapeless`)
    shapeless: bool = False


@dataclass(frozen=True)
class Answer:
    model: str
    estimates: list[FusionEstimate]
    replays: list[ReplayRecord]
    variants: list[VariantEstimate]  # every variant of the chains' ops, at their calls
    passed_over: list[str] = field(default_factory=list)  # `--confirm`: chains not confirmed, why


class TargetError(UserError):
    """`fusebench fusions X` where X is no model and no experiment."""


def targets(
    given: str, layers: int | None, dtype: str | None, prompt_tokens: int, gen_tokens: int
) -> list[FusionTarget]:
    """A model as `run --model` takes it (its workload from the flags), or an experiment's models
    at its first workload and baseline variant."""
    if given in preset_names() or Path(given).is_dir() or is_repo_id(given):
        if layers is not None and given not in preset_names():
            raise TargetError(f"--layers {layers}: only for presets; {given} runs whole")
        kind = "preset" if given in preset_names() else "repo" if is_repo_id(given) else "path"
        spec = model_spec(**{kind: given}, layers=layers, dtype=dtype or "float32")
        workload = FusionWorkload(prompt_tokens, gen_tokens, 1, DEFAULT_PREFILL_STEP_SIZE)
        return [FusionTarget(hub_found(spec), workload, {})]
    try:
        exp = load_experiment(given)
    except SpecError as err:
        raise TargetError(
            f"fusions {given}: neither a preset ({', '.join(preset_names())}), a checkpoint "
            f"folder, a repo id, nor an experiment ({err})"
        ) from None
    first = exp.workloads[0]
    workload = FusionWorkload(
        first.prompt_tokens, first.gen_tokens, first.batch, exp.prefill_step_size
    )
    baseline = exp.comparisons[0].baseline if exp.comparisons else next(iter(exp.variants))
    return [FusionTarget(hub_found(m), workload, exp.variants[baseline]) for m in exp.models]


def run_fusions(job: FusionJob, console: Console, *, quiet: bool = False) -> list[Answer]:
    """Every target searched, its records written to `job.out` as they come."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ...core.results import ResultsWriter

    run_id = new_run_id()
    answers = []
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
    )
    with ResultsWriter(job.out) as writer, progress:
        writer.write(
            run_header(run_id, StoredExperiment(name="fusions"), job.env, rounds=job.rounds)
        )
        for target in job.targets:
            answers.append(_search(run_id, target, job, writer.write, progress, console))
    if not job.confirm:
        return answers
    return [
        _confirmed(run_id, job, target, answer, console)
        for target, answer in zip(job.targets, answers, strict=True)
    ]


def _confirmed(
    run_id: str, job: FusionJob, target: FusionTarget, answer: Answer, console: Console
) -> Answer:
    """The answer with its first `job.confirm` classes compiled and measured end to end."""
    from ...core.results import ResultsWriter

    chosen, passed = picks(
        answer.estimates,
        job.confirm,
        target.ops,
        shapeless=job.shapeless,
        variants=answer.variants,
    )
    if not chosen:
        return replace(answer, passed_over=passed)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", answer.model).strip("-")
    folder = job.out.parent / f"{job.out.name.split('.')[0]}-confirm" / slug
    workload = target.workload
    experiment = write_confirmation(
        folder,
        target.model,
        target.ops,
        chosen,
        (workload.prompt_tokens, workload.gen_tokens),
        job.plugins,
    )
    names = ", ".join(f"{p.origin or p.op} {p.variant}" for p in chosen)
    console.print(f"{answer.model}: measuring {names}, end to end ({experiment})")
    results = folder / "results.jsonl.gz"
    run_confirmation(experiment, results, to_stderr=job.quiet)
    records = measured(run_id, answer.model, chosen, results, folder / PLUGIN)
    with ResultsWriter(job.out) as writer:
        for record in records:
            writer.write(record)
    estimates = [
        replace(
            e,
            measured={r.metric: r for r in records if e.record.candidate in r.candidates},
        )
        for e in answer.estimates
    ]
    return replace(answer, estimates=estimates, passed_over=passed)


def _search(
    run_id: str,
    target: FusionTarget,
    job: FusionJob,
    write: Callable[[object], None],
    progress: Progress,
    console: Console,
) -> Answer:
    label, rounds = target.model.label, job.rounds
    task = progress.add_task(f"{label}: loading", total=None)
    spec = target.model
    model = load_model(
        spec.source,
        layers=spec.layers,
        dtype=spec.dtype,
        quantize=spec.quantize,
        ops=target.ops,
        implementation=spec.implementation,
        weights_cache=WeightsCache(weights_cache_dir()),
    )
    progress.update(task, description=f"{label}: tracing")
    start = time.perf_counter()
    found = find(run_id, label, model, target.workload)
    for record in found.replays:
        write(record)
    console.print(
        f"{label}: {len(found.candidates)} chains found in {time.perf_counter() - start:.0f} s"
    )
    samples_total = rounds * 2 + 2 * rounds * len(found.candidates)  # steps: prefill and decode
    progress.update(task, description=f"{label}: steps", total=samples_total)
    steps: list[StepRecord] = []
    samples: list[OpRecord] = []

    def emit(record: object) -> None:
        write(record)
        if isinstance(record, StepRecord):
            steps.append(record)
        elif isinstance(record, OpRecord):
            samples.append(record)
        else:
            return
        progress.advance(task)

    time_steps(run_id, label, model, target.workload, rounds, emit)
    progress.update(task, description=f"{label}: chains")
    records: list[FusionRecord] = time_candidates(
        run_id, label, found, rounds, emit, shapeless=job.shapeless
    )
    speeds = summarize_ops(s for s in samples if s.op == FUSION_OP)
    ops = [
        op for op in dict.fromkeys(r.op for r in records if r.op) if len(REGISTRY[op].variants) > 1
    ]
    progress.update(task, description=f"{label}: {', '.join(ops) or 'no'} variants")
    variants: list[VariantRecord] = []
    time_op_variants(run_id, label, model, target.workload, ops, rounds, variants.append)
    for record in variants:
        write(record)
    return Answer(
        label,
        estimates(records, samples, steps, speeds),
        found.replays,
        variant_estimates(variants, steps),
    )
