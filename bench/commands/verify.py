"""check that every op-variant combination computes the same logits

Runs every combination of registered op variants on the same weights and prompt, against the
all-reference assignment (unfused geglu and softcap, manual attention, composed rms_norm and rope).
Prints max abs/rel logit error and greedy-token agreement; exits 1 if anything is outside tolerance.

examples:
  fusebench verify                                  the tiny preset, every combination (seconds)
  fusebench verify --model e2b --layers 2 --tokens 4
  fusebench verify --plugin my_fusions.py           a plugin's variants against the reference
"""

from __future__ import annotations

import argparse

from rich.console import Console

from .args import add_plugin_argument, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="tiny",
        help="preset name, checkpoint directory or Hugging Face repo id (default: tiny)",
    )
    parser.add_argument("--layers", type=positive_int, help="truncate a preset to N layers")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    parser.add_argument("--quantize", help="affine4, affine8, mxfp4, mxfp8 or nvfp4")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt-tokens", type=positive_int, default=24)
    parser.add_argument(
        "--tokens", type=positive_int, default=16, help="greedy steps compared (default 16)"
    )
    parser.add_argument("--atol", type=float, help="max |logit error| allowed (default by dtype)")
    add_plugin_argument(parser)


def main(args: argparse.Namespace, console: Console) -> int:
    from ..measure.machine.env import require_backend

    require_backend()  # before anything imports mlx: one line naming the extra, not a traceback
    from ..measure.hub import is_repo_id, resolve
    from ..measure.ops.verify import VerifyOptions, run_verify
    from ..measure.plugins import load_plugins

    load_plugins(args.plugin)
    model = args.model
    if is_repo_id(model):
        snapshot = resolve(model)
        console.print(f"{model}: commit {snapshot.commit} ({snapshot.path})", highlight=False)
        model = snapshot.path
    options = VerifyOptions(
        model=model,
        layers=args.layers,
        dtype=args.dtype,
        quantize=args.quantize,
        seed=args.seed,
        prompt_tokens=args.prompt_tokens,
        tokens=args.tokens,
        atol=args.atol,
    )
    return run_verify(options, console)
