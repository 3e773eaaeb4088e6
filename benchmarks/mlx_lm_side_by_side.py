"""fusebench's figures beside `mlx_lm.benchmark`'s, on one checkpoint, with the same BLAS and the
same threads.

Saves Gemma 4 E2B truncated to 2 layers (fp32, seeded weights: nothing is downloaded) as an mlx-lm
checkpoint with a stub tokenizer (mlx_lm.benchmark loads one; it only detokenizes the random
tokens), then, one after the other, in fresh processes started with the same environment (the
optimized BLAS preloaded as fusebench's workers have it):

- `python -m mlx_lm.benchmark --model CKPT -p P -g G -n N`: mlx-lm's own gemma4_text code and
  stream_generate;
- the same stream_generate loop in a child of ours, synchronizing mlx-lm's generation stream between
  trials ("drained");
- fusebench's worker timing (`time_trial`) on the same checkpoint: one warmup, then N trials, with
  the ops mlx-lm's gemma4_text runs (compiled GeGLU and softcap, fused SDPA, mx.fast RMSNorm and
  RoPE).

It prints the means of the N trials (mlx_lm.benchmark prints means too) side by side. What to
expect:
- ttft_tps vs prompt_tps: the same clock, stream_generate's time to its first token, which takes in
  queuing the first decode step (on the CPU backend, running all of it but its last ~100 kernels;
  see bench/measure/worker.py), but mlx_lm.benchmark runs its trials back to back and generate_step
  leaves one step queued past max_tokens, so its prompt_tps also pays for the previous trial's
  orphaned decode step (E2B 2 layers, 1 thread: 246-248 back to back against 351-366 after
  mx.synchronize, where fusebench's ttft_tps read 352-394): the prompt ratio is > 1;
- gen_tps ~ generation_tps x (G - 1) / G: mlx-lm counts G tokens in a time that holds G - 1 decode
  steps (its clock starts at the first token and its loop queues one step past the last);
- prefill_tps a few % above ttft_tps on CPU: fusebench's prefill stops at the first token.

Threads: by default the BLAS's own (every core), which is what an mlx-lm user gets; `--threads N`
limits both.

    python benchmarks/mlx_lm_side_by_side.py [--prompt 128] [--gen 128] [--trials 5] [--threads N]
    [--checkpoint DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel

from fusebench.measure.machine.env import THREAD_VARIABLES, blas_preload_env, thread_env
from fusebench.measure.worker import make_prompt, time_trial
from fusebench.models import load_model, save_checkpoint

ROOT = Path(__file__).resolve().parents[1]
PREFILL_STEP = 2048  # mlx_lm.benchmark's default, passed to both sides
# What mlx-lm's gemma4_text computes with, so the two sides run the same kernels.
MLX_LM_OPS = {
    "geglu": "compiled",
    "softcap": "compiled",
    "attention": "sdpa",
    "rms_norm": "fast",
    "rope": "fast",
}
TRIAL_LINE = re.compile(
    r"Trial \d+:\s+prompt_tps=([\d.]+), generation_tps=([\d.]+), peak_memory=([\d.]+)"
)


def write_stub_tokenizer(path: Path, vocab_size: int) -> None:
    """A word-level tokenizer over the whole vocabulary ("t0" ... ): every token the model can emit
    decodes."""
    tokenizer = Tokenizer(WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(path / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "t0"}
    (path / "tokenizer_config.json").write_text(json.dumps(config))


def ensure_checkpoint(path: Path, preset: str, layers: int) -> Path:
    """The checkpoint at `path`, saved there first unless a previous run left one."""
    if (path / "config.json").is_file():
        return path
    model = load_model(preset, layers=layers, dtype="float32")
    save_checkpoint(model, path)
    write_stub_tokenizer(path, model.args.vocab_size)
    return path


def side_env(threads: int | None) -> tuple[dict[str, str], str]:
    """Both sides' environment: fusebench's BLAS preload, and `threads` BLAS threads or the BLAS's
    own default."""
    env, blas = blas_preload_env("auto", os.environ)
    if threads:
        return thread_env(env, threads), f"{blas}; {threads} thread(s)"
    env = {k: v for k, v in env.items() if k not in THREAD_VARIABLES}
    return env, f"{blas}; BLAS default threads ({os.cpu_count()} cores)"


def run_mlx_lm(checkpoint: Path, args: argparse.Namespace, env: dict[str, str]) -> dict[str, float]:
    command = [
        sys.executable,
        "-m",
        "mlx_lm.benchmark",
        "--model",
        str(checkpoint),
        "-p",
        str(args.prompt),
        "-g",
        str(args.gen),
        "-n",
        str(args.trials),
        "--prefill-step-size",
        str(PREFILL_STEP),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    trials = [tuple(map(float, m.groups())) for m in TRIAL_LINE.finditer(done.stdout)]
    if done.returncode or not trials:
        sys.exit(
            f"mlx_lm.benchmark failed (exit {done.returncode}):\n"
            f"{done.stdout}\n{done.stderr[-3000:]}"
        )
    prompt_tps, generation_tps, peak_gb = (
        statistics.mean(column) for column in zip(*trials, strict=True)
    )
    return {"prompt_tps": prompt_tps, "generation_tps": generation_tps, "peak_gb": peak_gb}


def run_side(
    side: str, checkpoint: Path, args: argparse.Namespace, env: dict[str, str]
) -> dict[str, float]:
    """One of this script's own sides ("fusebench" or "drained") in a fresh child process; its JSON
    means."""
    command = [
        sys.executable,
        __file__,
        "--side",
        side,
        "--checkpoint",
        str(checkpoint),
        "--prompt",
        str(args.prompt),
        "--gen",
        str(args.gen),
        "--trials",
        str(args.trials),
    ]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{side} side failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fusebench_side(args: argparse.Namespace) -> None:
    """In the child: the worker's timing on the checkpoint, as a trial record carries it; prints the
    means."""
    model = load_model(args.checkpoint, ops=MLX_LM_OPS)
    records = []
    for r in range(-1, args.trials):  # round -1 is the warmup, as mlx_lm.benchmark runs one
        prompt = make_prompt(model.args.vocab_size, 1, args.prompt, 0, max(r, 0))
        timing = time_trial(model, prompt, args.gen, PREFILL_STEP)
        if r >= 0:
            records.append(timing.measured)
    means = {
        k: statistics.mean(getattr(rec, k) for rec in records)
        for k in ("prefill_tps", "ttft_tps", "gen_tps", "peak_memory_bytes")
    }
    print(json.dumps({**means, "peak_gb": means.pop("peak_memory_bytes") / 1e9}))


def drained_side(args: argparse.Namespace) -> None:
    """In the child: mlx_lm.benchmark's own loop (stream_generate on mlx-lm's gemma4_text, EOS
    disabled), but with mx.synchronize(generation_stream) after each trial, so no trial's prompt
    clock pays for the step the previous one left queued."""
    import mlx.core as mx
    from mlx_lm import load, stream_generate

    # mlx-lm generates on its own stream, not the default one
    from mlx_lm.generate import generation_stream

    model, tokenizer = load(str(args.checkpoint))
    tokenizer._eos_token_ids = {}  # as mlx_lm.benchmark does: exactly G tokens every trial
    mx.random.seed(0)
    prompt = mx.random.randint(0, model.args.vocab_size, (args.prompt,)).tolist()
    responses = []
    for r in range(-1, args.trials):  # one warmup, as mlx_lm.benchmark runs
        last = None
        for last in stream_generate(  # noqa: B007 (the last one)
            model,
            tokenizer,
            prompt,
            max_tokens=args.gen,
            prefill_step_size=PREFILL_STEP,
        ):
            pass
        mx.synchronize(generation_stream)
        if r >= 0:
            responses.append(last)
    print(
        json.dumps(
            {
                "prompt_tps": statistics.mean(x.prompt_tps for x in responses),
                "generation_tps": statistics.mean(x.generation_tps for x in responses),
            }
        )
    )


def print_table(
    mlx: dict[str, float],
    ours: dict[str, float],
    args: argparse.Namespace,
    where: str,
    drained: dict[str, float],
) -> None:
    print(
        f"E2B ({args.layers} layers, fp32) · prompt {args.prompt} "
        f"· gen {args.gen} · {args.trials} trials, means"
    )
    print(f"{where}")
    rows = [
        ("prompt", "prompt_tps", mlx["prompt_tps"], "ttft_tps", ours["ttft_tps"]),
        ("generation", "generation_tps", mlx["generation_tps"], "gen_tps", ours["gen_tps"]),
        ("prefill", "prompt_tps", mlx["prompt_tps"], "prefill_tps", ours["prefill_tps"]),
        ("peak memory", "GB", mlx["peak_gb"], "GB", ours["peak_gb"]),
    ]
    print(f"{'':12s} {'mlx_lm.benchmark':>28s} {'fusebench':>24s} {'fusebench / mlx-lm':>20s}")
    for name, mlx_key, mlx_value, our_key, our_value in rows:
        print(
            f"{name:12s} {mlx_key:>16s} {mlx_value:11.2f} {our_key:>12s} {our_value:11.2f} "
            f"{our_value / mlx_value:20.3f}"
        )
    print(
        f"mlx-lm's stream_generate drained between trials: prompt_tps {drained['prompt_tps']:.2f} "
        f"(fusebench ttft_tps / it = {ours['ttft_tps'] / drained['prompt_tps']:.3f}), "
        f"generation_tps {drained['generation_tps']:.2f} (fusebench gen_tps / it = "
        f"{ours['gen_tps'] / drained['generation_tps']:.3f})"
    )
    print(
        "expected: prompt > 1 by the previous trial's orphaned decode step in mlx-lm's prompt "
        f"clock; generation ~(G-1)/G = {(args.gen - 1) / args.gen:.3f} (mlx-lm counts G tokens "
        "over G-1 decode steps); prefill a little above prompt on CPU (fusebench's prefill stops "
        "at the first token, mlx-lm's clock also takes in queuing the first decode step)"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--gen", type=int, default=128)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="BLAS threads (default: the BLAS's own, all cores)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="where to save the checkpoint (reused when it holds one; default: a temporary folder)",
    )
    # a child process
    parser.add_argument("--side", choices=("fusebench", "drained"), help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.side:
        {"fusebench": fusebench_side, "drained": drained_side}[args.side](args)
        return
    with tempfile.TemporaryDirectory(prefix="fusebench-side-by-side-") as scratch:
        checkpoint = ensure_checkpoint(args.checkpoint or Path(scratch) / "e2b", "e2b", args.layers)
        env, where = side_env(args.threads)
        mlx = run_mlx_lm(checkpoint, args, env)
        drained = run_side("drained", checkpoint, args, env)
        ours = run_side("fusebench", checkpoint, args, env)
    print_table(mlx, ours, args, where, drained)


if __name__ == "__main__":
    main()
