"""The worker: one process per model (and build). It builds or loads the weights once, then carries
out the runner's commands one by one: the kernel facts, one trial of one variant (a warm-up trial
may carry the correctness check: its logits against the reference variant's), a depth sweep, op
shares. The variants are switched with `set_ops`; the runner decides their order.

It reads a job (`job.WorkerJob`) and then commands (`job.Command`), one JSON line each, on stdin,
and writes events (`job.Event`, JSON lines) on stdout; anything else that prints goes to stderr, so
a chatty library cannot corrupt the stream. The parent (measure.run.runner) stores the records.

Timing follows mlx-lm's generate_step, so the figures compare with mlx_lm.benchmark and ollama's
bench:
- prefill: the prompt but its last token in chunks of prefill_step_size, evaluating only the KV
  cache (as mlx-lm does, no logits for those positions), then the last token with logits, until the
  first generated token is evaluated;
- gen: the remaining gen_tokens - 1 greedy steps, each step queued with async_eval before the
  previous token is waited for;
- ttft: mlx-lm's own "prompt_tps" clock (stream_generate's time to its first token), read in the
  same trial: the prefill's token as mlx-lm's loop reads it, after the first decode step has been
  queued (see `decode`).

Why prefill and ttft differ, and why one trial gives both. generate_step queues step 1 with
async_eval before it waits for the prefill's token, and stream_generate stops its prompt clock only
then, so its TTFT holds whatever that async_eval call blocks for. On Metal/CUDA it returns once the
step is encoded and committed (unless more than MAX_ACTIVE_TASKS command buffers are in flight):
ttft is prefill plus building and encoding one step. On the CPU backend the calling thread walks the
graph and hands each kernel to the stream's worker thread, and blocks (mlx transforms.cpp:
scheduler::wait_for_one while more than MAX_ACTIVE_TASKS = 10 tasks of DISPATCHES_PER_TASK = 10
kernels are in flight) until that thread is within ~100 kernels of it. So async_eval returns when
all of step 1 but its last ~100 kernels has run; the tail, here the tied lm_head over the whole
vocabulary, is not in TTFT. Measured on E2B 2 layers, 2-core CPU: async_eval(step 1) 41-49 ms of a
300 ms step, the rest in the next eval; ttft_tps 5-10% below prefill_tps, and within noise of
mlx-lm's own generate_step on the same model in the same process. Reading the clock where that wait
ends costs one perf_counter call and leaves prefill_s and gen_s as they were: prefill stops at the
first token, gen starts there and still counts step 1.

mlx_lm.benchmark's prompt_tps reads lower still, for another reason: generate_step queues one step
past max_tokens that nobody waits for, and the benchmark starts its next trial at once, so each
trial's prompt clock also runs while the previous trial's orphaned step finishes (on a GPU all of
it, on CPU its tail). Measured (E2B 2 layers, 1 thread): stream_generate back to back 246-248 prompt
tok/s, the same call after mx.synchronize 351-366. A trial here starts with mx.synchronize and
leaves no step queued, so ttft excludes that leftover on purpose.

Why one long module: it is the other end of the worker protocol, the whole program of a worker
process, which another tree's runner launches by this path; what one trial times reads in one
place (docs/timing.md cites its spans).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial

import mlx.core as mx
from mlx.utils import tree_flatten

from fusebench.models.config import (
    Overrides,
    min_layers,
    preset_config,
    preset_names,
    runs_own_decoder,
)
from fusebench.models.gemma4 import Model
from fusebench.models.loading import AnyModel, WeightsCache, build_model, load_model
from fusebench.models.switched import SwitchedModel

from ..core.cell import Agreement, DepthSpeed, KernelFact, Measured, SiteCalls, Trial
from .job import Command, Do, Done, Event, Loaded, Recorded, WorkerJob, encode_event
from .machine.env import weights_cache_dir
from .ops.kernels import kernel_facts, traced_kernel_facts
from .ops.shares import ShareTimer, TracedCall, trace_steps
from .plugins import load_plugins

Emit = Callable[[Event], None]

# Prompt streams: timed round r uses r, warmup and depth rounds their own ranges.
WARMUP_STREAM, DEPTH_STREAM = 100_000, 200_000

# The correctness gate compares logits on at most this many prompt tokens.
CORRECTNESS_PROMPT = 256


@dataclass(frozen=True)
class TimedTrial:
    """A trial as the worker timed it: what its record says it measured, and with keep_logits the
    logits of the prompt's last position, then of each decode step (the correctness check's)."""

    measured: Measured
    logits: list[mx.array] | None = None


def make_prompt(vocab_size: int, batch: int, length: int, seed: int, round_id: int) -> mx.array:
    """The same prompt for every variant of a round; a different one each round (and for
    warmups)."""
    key = mx.random.key(seed * 1_000_003 + round_id)
    return mx.random.randint(0, vocab_size, (batch, length), key=key)


def prefill(model: AnyModel, prompt: mx.array, cache: list, step: int) -> mx.array:
    """Process the prompt; returns the logits of its last position."""
    while prompt.shape[1] > 1:
        n = min(step, prompt.shape[1] - 1)
        model(prompt[:, :n], cache=cache)
        mx.eval([c.state for c in cache])
        prompt = prompt[:, n:]
    return model(prompt, cache=cache)[:, -1, :]


def greedy(logits: mx.array) -> mx.array:
    return mx.argmax(logits, axis=-1)


def decode(
    model: AnyModel, token: mx.array, cache: list, steps: int, kept: list | None = None
) -> list[float]:
    """`steps` greedy steps, pipelined as mlx-lm does: the next step is queued before the current
    token is read.

    Returns when each token became available (perf_counter): first `token` itself as mlx-lm's
    generate_step yields it, after step 1 was queued (stream_generate's time to first token; see the
    module docstring), then each generated token, whose gaps are the inter-token latencies a
    streaming user sees. Empty when steps is 0. The clock is read only where mlx-lm's loop waits
    anyway, so the timing is unchanged. `kept`, when given, receives each step's logits (computed
    anyway for the greedy choice): the correctness check reads them.
    """
    ready = []
    for _ in range(steps):
        logits = model(token[:, None], cache=cache)[:, -1, :]
        if kept is not None:
            kept.append(logits)
        next_token = greedy(logits)
        mx.async_eval(next_token)
        mx.eval(token)
        ready.append(time.perf_counter())
        token = next_token
    if steps:
        mx.eval(token)
        ready.append(time.perf_counter())
    return ready


def time_trial(
    model: AnyModel,
    prompt: mx.array,
    gen_tokens: int,
    prefill_step_size: int,
    keep_logits: bool = False,
) -> TimedTrial:
    """One trial of `model` on `prompt`: its prefill, then `gen_tokens` - 1 decode steps, on the
    wall, process CPU and machine clocks, with each phase's peak memory; the rates are the batch's
    tokens over their seconds."""
    cache = model.make_cache()
    kept: list[mx.array] | None = [] if keep_logits else None
    mx.synchronize()
    mx.reset_peak_memory()
    machine_before = machine_seconds()
    started_unix_s = time.time()
    cpu_start = time.process_time()
    start = time.perf_counter()
    last = prefill(model, prompt, cache, prefill_step_size)
    if kept is not None:
        kept.append(last)
    first = greedy(last)
    mx.eval(first)
    prefilled = time.perf_counter()
    cpu_prefilled = time.process_time()
    # Each phase's own peak (microseconds, charged to the decode steps): a fusion that writes no
    # intermediates shows in the phase that ran it.
    prefill_peak = mx.get_peak_memory()
    mx.reset_peak_memory()
    ready = decode(model, first, cache, gen_tokens - 1, kept)
    generated = ready[1:]
    done = generated[-1] if generated else time.perf_counter()
    cpu_done = time.process_time()
    machine_after = machine_seconds()
    steps = [b - a for a, b in zip([prefilled, *generated], generated, strict=False)]
    ttft_s = ready[0] - start if ready else None
    steal_s, others_cpu_s = beside(machine_before, machine_after, cpu_done - cpu_start)
    gen_peak = mx.get_peak_memory() if generated else None
    batch, prompt_tokens = prompt.shape
    gen_steps = gen_tokens - 1
    prefill_s, gen_s = prefilled - start, done - prefilled
    measured = Measured(
        prefill_s=prefill_s,
        prefill_tps=batch * prompt_tokens / prefill_s,
        gen_s=gen_s if gen_steps else None,
        gen_tps=batch * gen_steps / gen_s if gen_steps else None,
        step_s=tuple(steps),
        peak_memory_bytes=max(prefill_peak, gen_peak or 0),
        prefill_peak_bytes=prefill_peak,
        gen_peak_bytes=gen_peak if gen_steps else None,
        ttft_s=ttft_s,
        ttft_tps=batch * prompt_tokens / ttft_s if ttft_s else None,
        prefill_cpu_s=cpu_prefilled - cpu_start,
        gen_cpu_s=cpu_done - cpu_prefilled if gen_steps else None,
        started_unix_s=started_unix_s,
        ended_unix_s=time.time(),
        steal_s=steal_s,
        others_cpu_s=others_cpu_s,
    )
    return TimedTrial(measured, kept)


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_seconds() -> tuple[float, float] | None:
    """Every core's busy seconds (steal excluded) and stolen seconds so far, from /proc/stat's
    first line (one read, tens of microseconds; clock ticks of 10 ms); None off Linux. Read just
    outside a trial's timed span."""
    try:
        with open("/proc/stat") as f:
            fields = [float(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0.0] * 8)[:8]
    return (user + nice + system + irq + softirq) / _TICKS, steal / _TICKS


def beside(
    before: tuple[float, float] | None, after: tuple[float, float] | None, own_s: float
) -> tuple[float | None, float | None]:
    """Between two machine_seconds readings: the seconds stolen, and the busy seconds not this
    process's (`own_s`)."""
    if before is None or after is None:
        return None, None
    return round(after[1] - before[1], 3), round(max(0.0, after[0] - before[0] - own_s), 3)


def teacher_forced_logits(
    model: AnyModel, prompt: mx.array, tokens: list[int], step: int
) -> list[mx.array]:
    """Logits after the prompt and after each given token: every variant is judged on the same
    inputs, so one near-tie cannot send the variants down different continuations."""
    cache = model.make_cache()
    logits = [prefill(model, prompt, cache, step)]
    for token in tokens:
        logits.append(model(mx.array([[token]]), cache=cache)[:, -1, :])
    mx.eval(logits)
    return logits


def greedy_logits(
    model: AnyModel, prompt: mx.array, n_tokens: int, step: int
) -> tuple[list[int], list[mx.array]]:
    """The greedy continuation and the logits that chose each of its tokens."""
    cache = model.make_cache()
    logits = [prefill(model, prompt, cache, step)]
    tokens = [greedy(logits[-1])[0].item()]
    while len(tokens) < n_tokens:
        logits.append(model(mx.array([[tokens[-1]]]), cache=cache)[:, -1, :])
        tokens.append(greedy(logits[-1])[0].item())
    mx.eval(logits)
    return tokens, logits


def agreements(
    model: AnyModel,
    variants: Mapping[str, dict],
    reference: str,
    prompt: mx.array,
    atol: float,
    tokens: int,
    step: int,
) -> list[Agreement]:
    """Each variant's logits and greedy tokens against the reference variant's, on the same prompt,
    each variant teacher-forced on the reference's tokens (`fusebench verify`; a run checks its
    warm-up's own logits, `warmup_agreement`).

    The prompt's first row and at most CORRECTNESS_PROMPT tokens: agreement of the logits does not
    need the full length."""
    prompt = prompt[:1, :CORRECTNESS_PROMPT]
    model.set_ops(variants[reference])
    greedy_tokens, ref_logits = greedy_logits(model, prompt, max(1, tokens), step)
    found = []
    for name, ops in variants.items():
        model.set_ops(ops)
        logits = (
            ref_logits
            if ops == variants[reference]
            else teacher_forced_logits(model, prompt, greedy_tokens[:-1], step)
        )
        found.append(_compare_logits(name, reference, ref_logits, logits, atol))
    return found


def warmup_agreement(
    name: str,
    reference: str,
    ref_logits: list[mx.array],
    logits: list[mx.array],
    atol: float,
    tokens: int,
) -> Agreement:
    """A variant's logits against the reference variant's from two warm-up trials of the same
    prompt, each decoding greedily on its own (no pass of their own: a run's check costs nothing).
    Steps are compared while both chose the same tokens: a step after two different tokens has
    other inputs. A decisive disagreement fails; a near tie ends the comparison there, and the
    record's tokens_checked says how far it got. The first batch row, at most `tokens` steps."""
    ref = [a[:1] for a in ref_logits[:tokens]]
    new = [a[:1] for a in logits[:tokens]]
    same_inputs = 1
    while same_inputs < min(len(ref), len(new)):
        if greedy(ref[same_inputs - 1]).item() != greedy(new[same_inputs - 1]).item():
            break
        same_inputs += 1
    return _compare_logits(name, reference, ref[:same_inputs], new[:same_inputs], atol)


def _compare_logits(
    name: str, reference: str, ref: list[mx.array], new: list[mx.array], atol: float
) -> Agreement:
    max_abs = max(
        mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max().item()
        for a, b in zip(ref, new, strict=True)
    )
    scale = max(mx.abs(a.astype(mx.float32)).max().item() for a in ref) or 1.0
    # A token disagreement only counts where the reference's choice is not itself within tolerance
    # of a tie.
    disagreements = sum(_decisive_disagreement(a, b, atol) for a, b in zip(ref, new, strict=True))
    return Agreement(
        variant=name,
        reference=reference,
        max_abs_err=max_abs,
        max_rel_err=max_abs / scale,
        tokens_checked=len(ref),
        tokens_agree=len(ref) - disagreements,
        atol=atol,
        passed=max_abs <= atol and disagreements == 0,
    )


def _decisive_disagreement(ref: mx.array, new: mx.array, atol: float) -> bool:
    top2 = mx.topk(ref[0].astype(mx.float32), 2)
    margin = (top2.max() - top2.min()).item()
    return greedy(ref[0]).item() != greedy(new[0]).item() and margin > 2 * atol


class CommandRunner:
    """Carries out the runner's commands on one loaded model."""

    def __init__(self, model: AnyModel, job: WorkerJob, emit: Emit) -> None:
        self.model = model
        self.job = job
        self.emit = emit
        self.cold_variants: set[str] = set(job.variants)
        self.vocab = model.vocab_size
        self.share_timers: dict[str, ShareTimer] = {}  # cell -> its traced calls, warmed up
        # the correctness check: cell -> each variant's logits from its check trial, until compared
        self.check_logits: dict[str, dict[str, list[mx.array]]] = {}
        self.checked: set[tuple[str, str]] = set()  # (cell, variant) compared

    def run(self, command: Command) -> None:
        handlers = {
            Do.KERNELS: self._kernels,
            Do.TRIAL: self._trial,
            Do.DEPTH: self._depth,
            Do.SHARES: self._shares,
        }
        handlers[command.do](command)
        self.emit(Done())

    def _kernels(self, command: Command) -> None:
        # Which kernels this cell's variants really run (fused or fallback): the A/B means something
        # only then.
        self.model.set_ops(next(iter(self.job.variants.values())))
        prompt = make_prompt(self.vocab, 1, command.cell.prompt_tokens, self.job.seed, 0)
        found = model_kernels(self.model, prompt, self.job.model.dtype, self.job.prefill_step_size)
        for result in [*found.sites, *found.facts]:
            self.emit(Recorded(result))

    def _trace(self, prompt: mx.array) -> dict[str, list[TracedCall]]:
        """The op calls of one prefill of `prompt` and the decode step after it. The calls do not
        depend on the variant (every implementation takes its op's arguments): any traces them."""
        self.model.set_ops(next(iter(self.job.variants.values())))
        return trace_steps(self.model, prompt, partial(prefill, step=self.job.prefill_step_size))

    def _trial(self, command: Command) -> None:
        cell, variant = command.cell, command.variant
        # The same prompt for every variant (and build) of a round; warmup prompts never repeat a
        # timed round's.
        # A check trial's prompt is the first warm-up round's in every round, so that a worker of a
        # duet compares variants it ran in different warm-up rounds on the same prompt.
        round_id = (
            WARMUP_STREAM + (0 if command.check else command.round)
            if command.warmup
            else command.round
        )
        prompt = make_prompt(self.vocab, cell.batch, cell.prompt_tokens, self.job.seed, round_id)
        self.model.set_ops(self.job.variants[variant])
        timed = time_trial(
            self.model, prompt, cell.gen_tokens, self.job.prefill_step_size, command.check
        )
        measured = timed.measured
        cold = variant in self.cold_variants
        self.cold_variants.discard(variant)
        self.emit(
            Recorded(
                Trial(
                    variant=variant,
                    ops=self.job.variants[variant],
                    round=command.round,
                    warmup=command.warmup,
                    measured=measured,
                    compile_s=(measured.prefill_s or 0.0) + (measured.gen_s or 0.0)
                    if cold
                    else None,
                )
            )
        )
        if timed.logits is not None:
            self._check(cell.key, variant, timed.logits)

    def _check(self, cell: str, variant: str, logits: list[mx.array]) -> None:
        """Each variant's agreement with the reference, as soon as this worker has run both on the
        cell's check prompt."""
        gate = self.job.correctness
        held = self.check_logits.setdefault(cell, {})
        held.setdefault(variant, logits)
        reference = held.get(gate.reference)
        if reference is None:
            return
        for name, found in held.items():
            if (cell, name) not in self.checked:
                self.checked.add((cell, name))
                agreement = warmup_agreement(
                    name, gate.reference, reference, found, gate.atol, gate.tokens
                )
                self.emit(Recorded(agreement))
        if all((cell, name) in self.checked for name in self.job.variants):
            del self.check_logits[cell]

    def _depth(self, command: Command) -> None:
        cell, steps = command.cell, max(1, command.cell.gen_tokens - 1)
        depths = sorted(command.depths)
        prompt = make_prompt(
            self.vocab, cell.batch, depths[-1], self.job.seed, DEPTH_STREAM + command.round
        )
        self.model.set_ops(self.job.variants[command.variant])
        for depth, gen_s in self._depth_sweep(prompt, depths, steps):
            self.emit(
                Recorded(
                    DepthSpeed(
                        variant=command.variant,
                        round=command.round,
                        depth=depth,
                        gen_tokens=steps,
                        gen_s=gen_s,
                        gen_tps=cell.batch * steps / gen_s,
                    )
                )
            )

    def _shares(self, command: Command) -> None:
        cell = command.cell
        if cell.key not in self.share_timers:
            prompt = make_prompt(self.vocab, cell.batch, cell.prompt_tokens, self.job.seed, 0)
            traced = self._trace(prompt)
            implementations = {
                op: [ops[op] for ops in self.job.variants.values()] for op in self.model.ops
            }
            self.share_timers[cell.key] = ShareTimer(traced, implementations)
        for share in self.share_timers[cell.key].time_round(command.round):
            self.emit(Recorded(share))

    def _depth_sweep(
        self, prompt: mx.array, depths: list[int], steps: int
    ) -> list[tuple[int, float]]:
        """One long prefill, stopping at each depth to time `steps` decode steps there."""
        cache = self.model.make_cache()
        step, filled, timings = self.job.prefill_step_size, 0, []
        for depth in depths:
            token = greedy(prefill(self.model, prompt[:, filled:depth], cache, step))
            mx.eval(token)
            start = time.perf_counter()
            decode(self.model, token, cache, steps)
            timings.append((depth, time.perf_counter() - start))
            filled = depth
        return timings


@dataclass
class ModelKernels:
    """A model's kernel facts, and for an mlx-lm model the names switched in it."""

    facts: list[KernelFact]
    sites: list[SiteCalls]


def model_kernels(model: AnyModel, prompt: mx.array, dtype: str, step: int) -> ModelKernels:
    """fusebench's decoder declares its calls (fusebench.models.ops, at the prompt's length); an
    mlx-lm model's are traced from one prefill of `prompt` and the decode step after it."""
    if isinstance(model, Model):
        facts = kernel_facts(model.args, prompt_tokens=prompt.shape[1], dtype=dtype)
        return ModelKernels(facts, [])
    traced = trace_steps(model, prompt, partial(prefill, step=step))
    return ModelKernels(traced_kernel_facts(traced), site_calls(model, prompt, step))


def probe_model(preset: str, dtype: str) -> AnyModel:
    """A preset's model for `fusebench kernels`, at two layers (one sliding, one full: per-layer
    shapes do not depend on the count) or the fewest it runs with. fusebench's decoder declares its
    calls, so its weights stay lazy; an mlx-lm model is traced, so its weights are seeded. A
    checkpoint folder (not a preset) loads whole."""
    if preset not in preset_names():
        return load_model(preset, dtype=dtype)
    config = preset_config(preset, Overrides(dtype=dtype))
    layers = max(2, min_layers(config))
    if runs_own_decoder(config, None):
        return build_model(preset_config(preset, Overrides(layers=layers, dtype=dtype)))
    return load_model(preset, layers=layers, dtype=dtype)


def site_calls(model: SwitchedModel, prompt: mx.array, step: int) -> list[SiteCalls]:
    """Which names were switched, and the calls through each in a prefill and a decode step."""
    cache = model.make_cache()
    with model.counting() as in_prefill:
        token = greedy(prefill(model, prompt, cache, step))
    with model.counting() as in_decode:
        mx.eval(model(token[:, None], cache=cache))
    return [
        SiteCalls(b.site.op, b.where, in_prefill[b.where], in_decode[b.where])
        for b in model.bindings
        if in_prefill[b.where] or in_decode[b.where]
    ]


def loaded(model: AnyModel, load_s: float, cache: WeightsCache) -> Loaded:
    params = tree_flatten(model.parameters())
    return Loaded(
        load_s,
        parameters=sum(v.size for _, v in params),
        weight_bytes=sum(v.nbytes for _, v in params),
        written_s=cache.written_s,
        not_kept=cache.not_kept,
    )


def serve(job: WorkerJob, commands: Iterable[str], emit: Emit) -> None:
    """Load the model, say so, then carry out each command line until the input ends."""
    load_plugins(job.plugins)
    start = time.perf_counter()
    spec = job.model
    cache = WeightsCache(weights_cache_dir())
    model = load_model(
        spec.source,
        layers=spec.layers,
        dtype=spec.dtype,
        quantize=spec.quantize,
        seed=job.seed,
        implementation=spec.implementation,
        weights_cache=cache,
    )
    emit(loaded(model, time.perf_counter() - start - cache.written_s, cache))
    runner = CommandRunner(model, job, emit)
    for line in commands:
        if line.strip():
            runner.run(Command.from_json(line))


def _event_stream() -> Emit:
    """Events go to the real stdout; fd 1 is pointed at stderr so stray prints from libraries cannot
    mix in."""
    stream = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def emit(event: Event) -> None:
        stream.write(encode_event(event) + "\n")
        stream.flush()

    return emit


def main() -> None:
    job = WorkerJob.from_json(sys.stdin.readline())
    emit = _event_stream()
    try:
        serve(job, sys.stdin, emit)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
