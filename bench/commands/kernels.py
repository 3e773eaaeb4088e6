"""which kernels really run: fused SDPA or its fallback, and what mx.compile made of each variant

An A/B between fused and unfused means something only if the fused kernel really runs, and MLX falls
back silently when it has none for a shape. For each attention call of each size (sliding head_dim
256 and full 512, prefill and decode, with its query and KV heads) this asks MLX for the fused SDPA
kernel (force_fused=True) and reports fused, or fallback with MLX's reason; for every registered
variant of every op it counts the kernels in the lazy graph after mx.compile, at the op's calls as
its declaration gives them (the shapes `fusebench ops` times). Every `fusebench run` records the
same facts per cell.

examples:
  fusebench kernels
  fusebench kernels --sizes e2b,31b --prompt-tokens 2048 --dtype bfloat16
  fusebench kernels --plugin my_fusions.py --out results/kernels.jsonl
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from .args import add_plugin_argument, names, positive_int

DEFAULT_SIZES = ["e2b", "e4b", "26b", "31b"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes",
        type=names,
        default=DEFAULT_SIZES,
        metavar="PRESETS",
        help="comma-separated presets, checkpoint folders or Hugging Face repo ids "
        f"(default: {','.join(DEFAULT_SIZES)})",
    )
    parser.add_argument(
        "--prompt-tokens",
        type=positive_int,
        default=128,
        metavar="N",
        help="prompt length of the probed attention calls "
        "(default 128); decode ones attend to N keys",
    )
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    add_plugin_argument(parser)
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="also append the facts to this results file"
    )


def main(args: argparse.Namespace, console: Console) -> int:
    from ..measure.machine.env import require_backend

    require_backend()  # before anything imports mlx: one line naming the extra, not a traceback

    from ..core.fileformat import new_run_id
    from ..core.header import StoredExperiment, run_header
    from ..core.results import ResultsWriter
    from ..core.typed import to_record
    from ..measure.hub import is_repo_id, resolve
    from ..measure.machine.env import collect_env, require_backend
    from ..measure.plugins import load_plugins
    from ..measure.worker import make_prompt, model_kernels, probe_model
    from ..present.document import Heading, Paragraph, to_console
    from ..present.kernels import compile_note, kernel_table, summarize_probes, switched_sentence

    load_plugins(args.plugin)
    found = {}
    for size in args.sizes:
        model = probe_model(resolve(size).path if is_repo_id(size) else size, args.dtype)
        prompt = make_prompt(model.vocab_size, 1, args.prompt_tokens, 0, 0)
        found[size] = model_kernels(model, prompt, args.dtype, step=args.prompt_tokens)
    facts_by_size = {size: kernels.facts for size, kernels in found.items()}
    for size, kernels in found.items():
        note = compile_note(kernels.facts)
        to_console(
            [
                Heading(f"{size} · {args.dtype} · prompt {args.prompt_tokens}", 3),
                *([Paragraph(switched_sentence(kernels.sites))] if kernels.sites else []),
                kernel_table(kernels.facts),
                Paragraph(summarize_probes(kernels.facts)),
                *([Paragraph(note)] if note else []),
            ],
            console,
        )
    if args.out:
        run_id = new_run_id()
        experiment = StoredExperiment(name="kernels")
        with ResultsWriter(args.out) as writer:
            writer.write(run_header(run_id, experiment, collect_env()))
            for size, facts in facts_by_size.items():
                for fact in facts:
                    writer.write({**to_record(fact), "run_id": run_id, "size": size})
        console.print(f"wrote {sum(map(len, facts_by_size.values()))} kernel records to {args.out}")
    return 0
