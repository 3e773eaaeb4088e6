"""`fusebench ops`: every registered op variant timed on its own, at the exact shapes each Gemma 4 size produces.

An end-to-end Δ says that a fusion helped; this says where. Each op × shape is one case. Its variants are warmed
up once (which pays mx.compile's JIT), then timed in rounds interleaved ABBA as `fusebench run` does, and every
sample is appended to the results store as a `kind: "op"` record. The table gives, per case and variant, the
median time, achieved GB/s and GFLOP/s, the largest deviation from the op's reference variant, and the paired
speed Δ against that reference with its bootstrap 95% CI (bench.analysis.stats).

Shapes come from the presets at full depth (per-layer shapes do not depend on the layer count) and from the
experiment's workloads. A shape shared by several sizes (the logits, E2B's and E4B's PLE gate) is timed once.
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
from typing import Any

import mlx.core as mx
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.gemma4_text import ModelArgs
from mlx_lm.models.rope_utils import initialize_rope
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from models.config import Overrides, attention_heads, preset_config
from models.errors import UnknownOpError
from models.gemma4 import rope_arguments  # the model's own conversion: the benchmark rotates exactly as it does
from models.loading import MX_DTYPES
from models.ops import REGISTRY

from ..core.records import new_run_id, run_header
from ..core.results import ResultsWriter
from ..core.spec import Experiment
from .env import blas_kind, blas_preload_env, collect_env, loaded_blas, thread_env
from .schedule import round_order

# Each sample runs enough calls to take this long, so timer resolution and dispatch jitter stay small.
MIN_SAMPLE_S = 0.02
# [B, L, 262144] fp32 logits are 1 GiB per 1024 positions, and one softcap over 512 of them takes ~2-3 s on a
# 2-core CPU. The op is elementwise, so a shorter L shows the same per-element cost (once past the caches).
FULL_LOGITS_MAX_TOKENS = 128
SEED = 0
REEXEC_MARKER = "FUSEBENCH_OPS_BLAS_REEXEC"

# Per-element FLOP counts, with tanh counted as one FLOP as FLOP counts conventionally do:
# gelu_approx(g) * u = 0.5 * g * (1 + tanh(c * (g + 0.044715 * g^3))) * u -> g^3 (2), * 0.044715, + g, * c,
# tanh, 1 +, * 0.5, * g, * u: 10. softcap tanh(x / cap) * cap: 3. rms_norm and rope get none: they are pure
# data movement whose GFLOP/s would only restate their GB/s.
GEGLU_FLOPS_PER_ELEMENT = 10
SOFTCAP_FLOPS_PER_ELEMENT = 3
# Gemma 4 normalizes q and k instead of scaling the scores, so the model calls attention with scale 1.0.
ATTENTION_SCALE = 1.0


@dataclass(frozen=True)
class OpCase:
    """One op at one shape. Hashable, so identical cases from several sizes are timed once.

    `arrays` are the shapes of the random array arguments, in order; `positional` the remaining positional
    arguments; `keywords` the keyword arguments, as (name, value) pairs. The output has the first array's shape.
    """

    op: str
    role: str
    arrays: tuple[tuple[int, ...], ...]
    dtype: str = "float32"
    positional: tuple[Any, ...] = ()
    keywords: tuple[tuple[str, Any], ...] = ()
    sizes: tuple[str, ...] = field(default=(), compare=False)
    note: str | None = field(default=None, compare=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.arrays[0]

    @property
    def label(self) -> str:
        # Attention's q and kv differ in shape, so both are shown; the other ops are named by their input's.
        shapes = f"q{_dims(self.arrays[0])} kv{_dims(self.arrays[1])}" if self.op == "attention" else _dims(self.shape)
        dtype = "" if self.dtype == "float32" else f" {self.dtype}"
        return f"{'/'.join(self.sizes)} {self.role} {shapes}{dtype}".strip()


def _dims(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]" if shape else ""


# --- the shapes each size produces ---------------------------------------------------------------


def geglu_cases(config: dict[str, Any], tokens: tuple[int, int]) -> list[OpCase]:
    """The MLP, the double-wide MLP of KV-shared layers, the MoE experts and the PLE gate."""
    batch, length = tokens
    cases = [OpCase("geglu", "mlp", _pair((batch, length, config["intermediate_size"])))]
    if config.get("use_double_wide_mlp") and config.get("num_kv_shared_layers", 0) > 0:
        wide = (batch, length, 2 * config["intermediate_size"])
        cases.append(OpCase("geglu", "mlp double-wide", _pair(wide)))
    if config.get("enable_moe_block"):
        # SwitchGLU sorts the (token, expert) pairs and runs the activation on [tokens * top_k, 1, width].
        rows = batch * length * config["top_k_experts"]
        cases.append(OpCase("geglu", "moe expert", _pair((rows, 1, config["moe_intermediate_size"]))))
    if config.get("hidden_size_per_layer_input", 0) > 0:
        cases.append(OpCase("geglu", "ple gate", _pair((batch, length, config["hidden_size_per_layer_input"]))))
    return cases


def _pair(shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    return (shape, shape)


def softcap_cases(config: dict[str, Any], tokens: tuple[int, int]) -> list[OpCase]:
    batch, length = tokens
    cap, vocab = config["final_logit_softcapping"], config["vocab_size"]
    full = min(length, FULL_LOGITS_MAX_TOKENS)
    capped = f"; L capped at {full} of {length}: an elementwise op's time scales with L" if full < length else ""
    return [
        OpCase(
            "softcap", "logits decode", ((batch, 1, vocab),), positional=(cap,),
            note="every decode step, and prefill too: mlx-lm-style prefill computes logits for the last position only",
        ),
        OpCase(
            "softcap", "logits full", ((batch, full, vocab),), positional=(cap,),
            note=f"logits for every prompt position (scoring, speculative verification){capped}",
        ),
    ]


def attention_cases(config: dict[str, Any], tokens: tuple[int, int]) -> list[OpCase]:
    """Prefill (causal, the window's mask where the prompt is longer) and decode, for both layer types."""
    batch, length = tokens
    heads, window = config["num_attention_heads"], config["sliding_window"]
    cases = []
    for layer_type, kind in (("sliding_attention", "sliding"), ("full_attention", "full")):
        head_dim, kv_heads = attention_heads(config, layer_type)
        layer_window = window if kind == "sliding" else None
        # A sliding layer's rotating cache never holds more than the window.
        kv_length = min(length, window) if kind == "sliding" else length
        prefill_kv = (batch, kv_heads, length, head_dim)
        decode_kv = (batch, kv_heads, kv_length, head_dim)
        cases += [
            OpCase(
                "attention", f"prefill {kind}", ((batch, heads, length, head_dim), prefill_kv, prefill_kv),
                keywords=(("scale", ATTENTION_SCALE), ("mask", "causal"), ("window", layer_window)),
            ),
            OpCase(
                "attention", f"decode {kind}", ((batch, heads, 1, head_dim), decode_kv, decode_kv),
                keywords=(("scale", ATTENTION_SCALE), ("mask", None), ("window", None)),
            ),
        ]
    return cases


def rms_norm_cases(config: dict[str, Any], tokens: tuple[int, int]) -> list[OpCase]:
    hidden = config["hidden_size"]
    return [OpCase("rms_norm", "hidden", ((*tokens, hidden), (hidden,)), positional=(config["rms_norm_eps"],))]


def rope_cases(config: dict[str, Any], tokens: tuple[int, int]) -> list[OpCase]:
    """q's rotation in both layer types: full layers rotate only a quarter of their dims (ProportionalRoPE)."""
    batch, length = tokens
    args = ModelArgs.from_dict(config)
    cases = []
    for layer_type, kind in (("sliding_attention", "sliding"), ("full_attention", "full")):
        head_dim, _ = attention_heads(config, layer_type)
        keywords = _rope_keywords(args, layer_type, head_dim)
        rotated = _rotated_fraction(dict(keywords), head_dim)
        role = kind if rotated == 1 else f"{kind} ({rotated:.0%} rotated)"
        cases.append(OpCase("rope", role, ((batch, config["num_attention_heads"], length, head_dim),),
                            keywords=keywords))
    return cases


def _rope_keywords(args: ModelArgs, layer_type: str, head_dim: int) -> tuple[tuple[str, Any], ...]:
    params = args.rope_parameters.get(layer_type, {})
    rope = initialize_rope(
        dims=head_dim, traditional=args.rope_traditional, base=params.get("rope_theta", 10000.0),
        scaling_config=params, max_position_embeddings=args.max_position_embeddings,
    )
    keywords = rope_arguments(rope)
    periods = keywords["periods"]
    # A tuple keeps the case hashable; prepare_inputs turns it back into the array the model passes.
    keywords["periods"] = None if periods is None else tuple(periods.tolist())
    return (*keywords.items(), ("offset", 0))


def _rotated_fraction(keywords: dict[str, Any], head_dim: int) -> float:
    periods = keywords["periods"]
    if periods is None:
        return keywords["dims"] / head_dim
    return 2 * sum(math.isfinite(p) for p in periods) / head_dim


CASE_BUILDERS: dict[str, Callable[[dict[str, Any], tuple[int, int]], list[OpCase]]] = {
    "geglu": geglu_cases,
    "softcap": softcap_cases,
    "attention": attention_cases,
    "rms_norm": rms_norm_cases,
    "rope": rope_cases,
}


def op_cases(
    config: dict[str, Any], size: str, *, prompt_tokens: int, batch: int = 1, dtype: str = "float32",
    only: Iterable[str] | None = None,
) -> list[OpCase]:
    """Every case of one size at one workload, in op order."""
    ops = list(only) if only is not None else list(CASE_BUILDERS)
    return [
        replace(case, sizes=(size,), dtype=dtype)
        for op in ops
        for case in CASE_BUILDERS[op](config, (batch, prompt_tokens))
    ]


def merge_cases(cases: Iterable[OpCase]) -> list[OpCase]:
    """Identical cases from several sizes become one, labelled with every size that produces it."""
    merged: dict[OpCase, OpCase] = {}
    for case in cases:
        first = merged.setdefault(case, case)
        if first is not case:
            merged[case] = replace(first, sizes=tuple(dict.fromkeys(first.sizes + case.sizes)))
    return sorted(merged.values(), key=lambda c: list(CASE_BUILDERS).index(c.op))


# --- what to benchmark ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One model size: its display label, full-depth config and activation dtype."""

    size: str
    preset: str
    config: dict[str, Any] = field(compare=False)
    dtype: str = "float32"


@dataclass(frozen=True)
class Plan:
    targets: tuple[Target, ...]
    workloads: tuple[tuple[int, int], ...]  # (prompt_tokens, batch)
    experiment: dict[str, Any]  # the run header's experiment: name, file, sha256, content
    notes: tuple[str, ...] = ()

    def cases(self, only: Iterable[str] | None = None) -> list[OpCase]:
        ops = None if only is None else list(only)
        return merge_cases(
            case
            for target in self.targets
            for prompt_tokens, batch in self.workloads
            for case in op_cases(target.config, target.size, prompt_tokens=prompt_tokens, batch=batch,
                                 dtype=target.dtype, only=ops)
        )


def _preset_target(name: str, dtype: str = "float32") -> Target:
    config = preset_config(name, Overrides())  # ModelConfigError names the valid presets
    return Target(str(config.get("size", name)), name, config, dtype)


def experiment_plan(exp: Experiment) -> Plan:
    """The sizes (preset models only) and workloads of an experiment."""
    targets = tuple(dict.fromkeys(
        replace(_preset_target(m.preset, m.dtype), size=m.size) for m in exp.models if m.preset is not None
    ))
    notes = tuple(f"skipped {m.size}: checkpoint models ({m.path}) have no preset shapes to derive"
                  for m in exp.models if m.preset is None)
    workloads = tuple(dict.fromkeys((w.prompt_tokens, w.batch) for w in exp.workloads))
    return Plan(targets, workloads, _experiment_header(exp.file, exp.content), notes)


def _experiment_header(file: str, content: str) -> dict[str, Any]:
    return {"name": "ops", "file": file, "sha256": hashlib.sha256(content.encode()).hexdigest(), "content": content}


def check_ops(ops: Sequence[str] | None) -> list[str] | None:
    """`--only geglu,softcap` -> the ops, each one that the op benchmark has shapes for."""
    for op in ops or ():
        if op not in CASE_BUILDERS:
            raise UnknownOpError(f"--only: unknown op {op!r}; choose from {', '.join(CASE_BUILDERS)}")
    return None if ops is None else list(ops)


# --- timing --------------------------------------------------------------------------------------


@dataclass
class Inputs:
    args: list[Any]
    kwargs: dict[str, Any]

    @property
    def nbytes(self) -> int:
        values = [*self.args, *self.kwargs.values()]
        return sum(v.nbytes for v in values if isinstance(v, mx.array))


def prepare_inputs(case: OpCase, seed: int = SEED) -> Inputs:
    """Seeded random arrays in the case's dtype, plus the arguments in the form the model passes them."""
    dtype = MX_DTYPES[case.dtype]
    arrays = [
        mx.random.normal(shape, dtype=dtype, key=mx.random.key(seed + i)) for i, shape in enumerate(case.arrays)
    ]
    kwargs = dict(case.keywords)
    if case.op == "attention":
        kwargs["mask"] = _attention_mask(kwargs["mask"], kwargs.pop("window"), case.shape[2])
    if case.op == "rope":
        # The model passes the cache offset as an array, and the periods as the rope module's array.
        kwargs["offset"] = mx.array(kwargs["offset"])
        if kwargs["periods"] is not None:
            kwargs["periods"] = mx.array(kwargs["periods"], dtype=mx.float32)
    inputs = Inputs([*arrays, *case.positional], kwargs)
    mx.eval([v for v in [*inputs.args, *inputs.kwargs.values()] if isinstance(v, mx.array)])
    return inputs


def _attention_mask(mask: str | None, window: int | None, length: int) -> str | mx.array | None:
    # As mlx-lm's create_attention_mask: "causal" unless a sliding window cuts into the prompt.
    if mask == "causal" and window is not None and length > window:
        return create_causal_mask(length, window_size=window)
    return mask


def time_calls(fn: Callable[..., mx.array], inputs: Inputs, iterations: int) -> float:
    """Seconds per call, over `iterations` calls each evaluated on its own.

    Evaluating many calls at once would let mlx schedule them breadth-first, so all their intermediates (manual
    attention's repeated K/V, say) live at once and thrash the caches, which no model does; each call pays
    mx.eval's fixed cost (~20 µs on a 2-core CPU) instead.
    """
    start = time.perf_counter()
    for _ in range(iterations):
        mx.eval(fn(*inputs.args, **inputs.kwargs))
    return (time.perf_counter() - start) / iterations


def case_flops(case: OpCase) -> int | None:
    """FLOPs of one call; None where the op is pure data movement (see GEGLU_FLOPS_PER_ELEMENT)."""
    elements = math.prod(case.shape)
    if case.op == "geglu":
        return GEGLU_FLOPS_PER_ELEMENT * elements
    if case.op == "softcap":
        return SOFTCAP_FLOPS_PER_ELEMENT * elements
    if case.op == "attention":
        # Two matmuls (q k^T, then p v) at 2 FLOPs per multiply-add, over the full L x S score matrix: the
        # masked half included, as the manual variant computes it.
        batch, heads, length, head_dim = case.shape
        return 4 * batch * heads * length * case.arrays[1][2] * head_dim
    return None


@dataclass
class Warm:
    """What the warmup established for a case: outputs' deviation from the reference, and calls per sample."""

    max_abs_err: dict[str, float]
    iterations: int
    bytes: int


def warm_up(inputs: Inputs, variants: dict[str, Callable[..., mx.array]], reference: str,
            min_sample_s: float) -> Warm:
    """One call per variant (paying any JIT), its deviation from the reference, then one timed call to size
    the samples: the same call count for every variant, so each sample spans >= min_sample_s."""
    outputs = {name: fn(*inputs.args, **inputs.kwargs) for name, fn in variants.items()}
    mx.eval(list(outputs.values()))
    ref = outputs[reference].astype(mx.float32)
    errors = {name: mx.abs(out.astype(mx.float32) - ref).max().item() for name, out in outputs.items()}
    written = outputs[reference].nbytes
    del outputs, ref
    fastest = min(time_calls(fn, inputs, 1) for fn in variants.values())
    iterations = max(1, math.ceil(min_sample_s / max(fastest, 1e-9)))
    return Warm(errors, iterations, inputs.nbytes + written)


def bench_case(case: OpCase, rounds: int, emit: Callable[[dict[str, Any]], None],
               min_sample_s: float = MIN_SAMPLE_S, advance: Callable[[], None] = lambda: None) -> None:
    """Warm up, then `rounds` ABBA-interleaved rounds of every registered variant of the case's op."""
    spec = REGISTRY[case.op]
    variants = dict(spec.variants)
    names = [spec.reference, *(name for name in variants if name != spec.reference)]
    inputs = prepare_inputs(case)
    warm = warm_up(inputs, variants, spec.reference, min_sample_s)
    flops = case_flops(case)
    for round_index in range(rounds):
        for name in round_order(names, round_index):
            seconds = time_calls(variants[name], inputs, warm.iterations)
            emit(op_record(case, name, round_index, seconds, warm, flops))
            advance()


def op_record(case: OpCase, variant: str, round_index: int, seconds: float, warm: Warm,
              flops: int | None) -> dict[str, Any]:
    return {
        "kind": "op", "op": case.op, "variant": variant, "reference": REGISTRY[case.op].reference,
        "shape_label": case.label, "size": "/".join(case.sizes), "sizes": list(case.sizes), "role": case.role,
        "shape": list(case.shape), "arg_shapes": [list(s) for s in case.arrays], "dtype": case.dtype,
        "round": round_index, "iterations": warm.iterations, "seconds": seconds,
        "bytes": warm.bytes, "flops": flops, "gbps": warm.bytes / seconds / 1e9,
        "gflops": None if flops is None else flops / seconds / 1e9,
        "max_abs_err": warm.max_abs_err[variant], "note": case.note,
    }


def worker_like_env(threads: int, environ: dict[str, str] | None = None) -> tuple[dict[str, str], str | None]:
    """The environment a run's workers would get: an optimized BLAS preloaded when mlx would use the reference one,
    and every BLAS limited to `threads` threads. Returns it and the BLAS it preloads (None: the preload is kept)."""
    env, picked = dict(os.environ if environ is None else environ), None
    if blas_kind(loaded_blas()) == "reference":
        preloaded, label = blas_preload_env("auto", env)
        if preloaded.get("LD_PRELOAD", "") != env.get("LD_PRELOAD", ""):
            env, picked = preloaded, label
    return thread_env(env, threads), picked


def ensure_worker_env(console: Console, threads: int) -> None:
    """Re-exec this process once in the environment a run's workers get (worker_like_env), unless it has it.

    Ops run in this process (no worker), and both LD_PRELOAD and a BLAS's thread count act only at process start
    (OpenBLAS reads OPENBLAS_NUM_THREADS when it loads), so setting them now would change nothing.
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


def run_ops(plan: Plan, cases: Sequence[OpCase], out: Path, console: Console, *, rounds: int,
            quiet: bool = False, min_sample_s: float = MIN_SAMPLE_S,
            env: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Time every case into `out` (a run header, then one record per sample); returns the op records. The header's
    env records the BLAS threads as a run's does (its `threads`, read from the environment ensure_worker_env set)."""
    run_id = new_run_id()
    records: list[dict[str, Any]] = []
    total = sum(len(REGISTRY[c.op].variants) for c in cases) * rounds
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("samples"),
                        TimeElapsedColumn(), console=console, disable=quiet)
    with ResultsWriter(out) as writer, progress:
        writer.write(run_header(run_id, plan.experiment, env or collect_env(), rounds=rounds))
        task = progress.add_task("ops", total=total)

        def emit(record: dict[str, Any]) -> None:
            record = {"kind": "op", "run_id": run_id, **record}
            writer.write(record)
            records.append(record)

        for case in cases:
            progress.update(task, description=case.label)
            bench_case(case, rounds, emit, min_sample_s, lambda: progress.advance(task))
    return records
