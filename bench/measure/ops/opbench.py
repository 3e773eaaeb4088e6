"""`fusebench ops`: every registered op variant timed on its own, at the exact shapes each Gemma 4
size produces.

An end-to-end Δ says that a fusion helped; this says where. Each op × shape is one case. Its
variants are warmed up once (which pays mx.compile's JIT), then timed in rounds interleaved ABBA as
`fusebench run` does, and every sample is appended to the results store as a `kind: "op"` record.
The table gives, per case and variant, the median time, achieved GB/s and GFLOP/s, the largest
deviation from the op's reference variant, and the paired speed Δ against that reference with its
bootstrap 95% CI (fusebench.analysis.stats).

Shapes come from each op's declaration (`fusebench.models.calls.OpCalls`, beside its variants in
models/ops.py or in a plugin), asked at the presets at full depth (per-layer shapes do not depend on
the layer count) and at the experiment's workloads. A shape shared by several sizes (the logits,
E2B's and E4B's PLE gate) is timed once.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import mlx.core as mx
from mlx_lm.models.gemma4_text import ModelArgs

from fusebench.models.config import Overrides, load_preset, preset_config, runs_own_decoder
from fusebench.models.errors import UnknownOpError
from fusebench.models.ops import REGISTRY, Inputs, OpCase, calls_by_op

from ...core.experiment import Experiment, ModelSpec
from ...core.fileformat import OpRecord, new_run_id
from ...core.header import Env, StoredExperiment, run_header
from ..machine.env import blas_kind, blas_preload_env, collect_env, loaded_blas, thread_env
from ..run.schedules.order import round_order

# Every worker imports this module (its timing loop) and needs none of these at run time: rich,
# pandas (the results store's frames) and scipy (the analysis) load where the ops command runs.
if TYPE_CHECKING:
    from rich.console import Console

# Each sample runs enough calls to take this long, so timer resolution and dispatch jitter stay
# small.
MIN_SAMPLE_S = 0.02
SEED = 0
REEXEC_MARKER = "FUSEBENCH_OPS_BLAS_REEXEC"


# --- the shapes each size produces ---------------------------------------------------------------


def op_cases(
    args: ModelArgs,
    size: str,
    *,
    prompt_tokens: int,
    batch: int = 1,
    dtype: str = "float32",
    only: Iterable[str] | None = None,
) -> list[OpCase]:
    """Every case of one size at one workload, in op order, as each op's declaration gives them."""
    calls = calls_by_op()
    ops = list(only) if only is not None else list(calls)
    return [
        replace(case, sizes=(size,), dtype=dtype)
        for op in ops
        for case in calls[op].cases(args, batch, prompt_tokens)
    ]


def merge_cases(cases: Iterable[OpCase]) -> list[OpCase]:
    """Identical cases from several sizes become one, labelled with every size that produces it."""
    merged: dict[OpCase, OpCase] = {}
    for case in cases:
        first = merged.setdefault(case, case)
        if first is not case:
            merged[case] = replace(first, sizes=tuple(dict.fromkeys(first.sizes + case.sizes)))
    order = list(REGISTRY)
    return sorted(merged.values(), key=lambda c: order.index(c.op))


# --- what to benchmark ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One model size: its display label, full-depth config and activation dtype."""

    size: str
    preset: str
    args: ModelArgs = field(compare=False)
    dtype: str = "float32"


@dataclass(frozen=True)
class OpBenchPlan:
    targets: tuple[Target, ...]
    workloads: tuple[tuple[int, int], ...]  # (prompt_tokens, batch)
    experiment: StoredExperiment  # the run header's experiment
    notes: tuple[str, ...] = ()

    def cases(self, only: Iterable[str] | None = None) -> list[OpCase]:
        ops = None if only is None else list(only)
        return merge_cases(
            case
            for target in self.targets
            for prompt_tokens, batch in self.workloads
            for case in op_cases(
                target.args,
                target.size,
                prompt_tokens=prompt_tokens,
                batch=batch,
                dtype=target.dtype,
                only=ops,
            )
        )


def _preset_target(name: str, dtype: str = "float32") -> Target:
    config = preset_config(name, Overrides())  # ModelConfigError names the valid presets
    return Target(str(config.get("size", name)), name, ModelArgs.from_dict(config), dtype)


def experiment_plan(exp: Experiment) -> OpBenchPlan:
    """The sizes (Gemma 4 presets in fusebench's decoder, whose calls are declared) and workloads
    of an experiment."""
    declared = [m for m in exp.models if _declares_calls(m)]
    targets = tuple(
        dict.fromkeys(replace(_preset_target(m.preset, m.dtype), size=m.size) for m in declared)
    )
    notes = tuple(_skip_note(m) for m in exp.models if m not in declared)
    workloads = tuple(dict.fromkeys((w.prompt_tokens, w.batch) for w in exp.workloads))
    return OpBenchPlan(targets, workloads, _experiment_header(exp.file, exp.content), notes)


def _declares_calls(model: ModelSpec) -> bool:
    return model.preset is not None and runs_own_decoder(
        load_preset(model.preset), model.implementation
    )


def _skip_note(model: ModelSpec) -> str:
    if model.preset is None:
        return f"skipped {model.size}: checkpoint models ({model.path}) have no preset shapes"
    return (
        f"skipped {model.size}: mlx-lm's models declare no calls; every run traces them and times "
        "each call on its own (the op shares of `fusebench run`)"
    )


def _experiment_header(file: str, content: str) -> StoredExperiment:
    return StoredExperiment(
        name="ops",
        file=file,
        sha256=hashlib.sha256(content.encode()).hexdigest(),
        content=content,
    )


def check_ops(ops: Sequence[str] | None) -> list[str] | None:
    """`--only geglu,softcap` -> the ops, each one whose declaration gives its calls."""
    calls = calls_by_op()
    for op in ops or ():
        if op not in calls:
            raise UnknownOpError(f"--only: unknown op {op!r}; choose from {', '.join(calls)}")
    return None if ops is None else list(ops)


# --- timing --------------------------------------------------------------------------------------


def prepare_inputs(case: OpCase, seed: int = SEED) -> Inputs:
    """The case's inputs as its op's declaration builds them, evaluated."""
    inputs = calls_by_op()[case.op].inputs(case, seed)
    mx.eval(inputs.arrays)
    return inputs


def time_calls(fn: Callable[..., mx.array], inputs: Inputs, iterations: int) -> float:
    """Seconds per call, over `iterations` calls each evaluated on its own.

    Evaluating many calls at once would let mlx schedule them breadth-first, so all their
    intermediates (manual attention's repeated K/V, say) live at once and thrash the caches, which
    no model does; each call pays mx.eval's fixed cost (~20 µs on a 2-core CPU) instead.
    """
    start = time.perf_counter()
    for _ in range(iterations):
        mx.eval(fn(*inputs.args, **inputs.kwargs))
    return (time.perf_counter() - start) / iterations


@dataclass
class Warm:
    """What the warmup established for a case: outputs' deviation from the reference, and calls per
    sample."""

    max_abs_err: dict[str, float]
    iterations: int
    bytes: int


def warm_up(
    inputs: Inputs,
    variants: dict[str, Callable[..., mx.array]],
    reference: str,
    min_sample_s: float,
) -> Warm:
    """One call per variant (paying any JIT), its deviation from the reference, then one timed call
    to size the samples: the same call count for every variant, so each sample
    spans >= min_sample_s."""
    outputs = {name: fn(*inputs.args, **inputs.kwargs) for name, fn in variants.items()}
    mx.eval(list(outputs.values()))
    ref = outputs[reference].astype(mx.float32)
    errors = {
        name: mx.abs(out.astype(mx.float32) - ref).max().item() for name, out in outputs.items()
    }
    written = outputs[reference].nbytes
    del outputs, ref
    fastest = min(time_calls(fn, inputs, 1) for fn in variants.values())
    iterations = max(1, math.ceil(min_sample_s / max(fastest, 1e-9)))
    return Warm(errors, iterations, inputs.nbytes + written)


def bench_case(
    run_id: str,
    case: OpCase,
    rounds: int,
    emit: Callable[[OpRecord], None],
    min_sample_s: float = MIN_SAMPLE_S,
    advance: Callable[[], None] = lambda: None,
) -> None:
    """Warm up, then `rounds` ABBA-interleaved rounds of every registered variant of the case's
    op."""
    spec = REGISTRY[case.op]
    variants = dict(spec.variants)
    names = [spec.reference, *(name for name in variants if name != spec.reference)]
    inputs = prepare_inputs(case)
    warm = warm_up(inputs, variants, spec.reference, min_sample_s)
    flops = calls_by_op()[case.op].flops(case)
    for round_index in range(rounds):
        for name in round_order(names, round_index):
            seconds = time_calls(variants[name], inputs, warm.iterations)
            emit(op_record(run_id, case, name, round_index, seconds, warm, flops))
            advance()


def op_record(
    run_id: str,
    case: OpCase,
    variant: str,
    round_index: int,
    seconds: float,
    warm: Warm,
    flops: int | None,
) -> OpRecord:
    return OpRecord(
        run_id=run_id,
        op=case.op,
        variant=variant,
        reference=REGISTRY[case.op].reference,
        shape_label=case.label,
        size="/".join(case.sizes),
        sizes=tuple(case.sizes),
        role=case.role,
        shape=tuple(case.shape),
        arg_shapes=tuple(tuple(s) for s in case.arrays),
        dtype=case.dtype,
        round=round_index,
        iterations=warm.iterations,
        seconds=seconds,
        bytes=warm.bytes,
        flops=flops,
        gbps=warm.bytes / seconds / 1e9,
        gflops=None if flops is None else flops / seconds / 1e9,
        max_abs_err=warm.max_abs_err[variant],
        note=case.note,
    )


def worker_like_env(
    threads: int, environ: dict[str, str] | None = None
) -> tuple[dict[str, str], str | None]:
    """The environment a run's workers would get: an optimized BLAS preloaded when mlx would use the
    reference one, and every BLAS limited to `threads` threads. Returns it and the BLAS it preloads
    (None: the preload is kept)."""
    env, picked = dict(os.environ if environ is None else environ), None
    if blas_kind(loaded_blas()) == "reference":
        preloaded, label = blas_preload_env("auto", env)
        if preloaded.get("LD_PRELOAD", "") != env.get("LD_PRELOAD", ""):
            env, picked = preloaded, label
    return thread_env(env, threads), picked


def ensure_worker_env(console: Console, threads: int) -> None:
    """Re-exec this process once in the environment a run's workers get (worker_like_env), unless it
    has it.

    Ops run in this process (no worker), and both LD_PRELOAD and a BLAS's thread count act only at
    process start (OpenBLAS reads OPENBLAS_NUM_THREADS when it loads), so setting them now would
    change nothing.
    """
    if os.environ.get(REEXEC_MARKER):
        return
    env, picked = worker_like_env(threads)
    if env == dict(os.environ):
        return
    console.print(f"restarting with {picked + ', ' if picked else ''}{threads} BLAS thread(s)")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, {**env, REEXEC_MARKER: "1"})


def run_ops(
    plan: OpBenchPlan,
    cases: Sequence[OpCase],
    out: Path,
    console: Console,
    *,
    rounds: int,
    quiet: bool = False,
    min_sample_s: float = MIN_SAMPLE_S,
    env: Env | None = None,
) -> list[OpRecord]:
    """Time every case into `out` (a run header, then one record per sample); returns the op
    records. The header's env records the BLAS threads as a run's does (its `threads`, read from the
    environment ensure_worker_env set)."""
    run_id = new_run_id()
    records: list[OpRecord] = []
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ...core.results import ResultsWriter

    total = sum(len(REGISTRY[c.op].variants) for c in cases) * rounds
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("samples"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
    )
    with ResultsWriter(out) as writer, progress:
        writer.write(run_header(run_id, plan.experiment, env or collect_env(), rounds=rounds))
        task = progress.add_task("ops", total=total)

        def emit(record: OpRecord) -> None:
            writer.write(record)
            records.append(record)

        for case in cases:
            progress.update(task, description=case.label)
            bench_case(run_id, case, rounds, emit, min_sample_s, lambda: progress.advance(task))
    return records
