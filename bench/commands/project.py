"""project truncated-depth results to N layers: tok/s and each Δ, with intervals from a per-layer
fit

A model run truncated (2 of 35 layers, to fit a small machine) spends most of a step in the LM head;
at full depth the layers dominate, so its Δ is not the full model's. Measured at several depths
(`layers: [2, 4, 6, 8]` in an experiment's model entry), each size × variant × metric is fitted as

    step time = fixed + c_sliding·sliding layers + c_full·full-attention layers (+
    c_shared·KV-shared layers)

by weighted least squares over the depths' mean times (the layer counts as
fusebench.models.config.truncate lays a depth out; the KV-shared term for E2B and E4B only), then
evaluated at N layers (default: the model's full depth). It prints the projected prefill and decode
tok/s with 95% intervals from the fit, each comparison's Δ (its interval treats the two fits as
independent: conservative), and the fitted costs with how well the depths fit them. Assumed: a layer
of a type costs the same at every depth, and the fixed part does not grow with depth.

Refused (one line, exit 2): a size measured at one depth, depths that cannot separate the terms (26B
at 2, 4, 6: one full-attention layer at each), runs of one model from several machines, checkpoint
(path) models, and --layers beyond a model's depth.

examples:
  fusebench project results/depths-20261201-0930.jsonl
  fusebench project results/depths-*.jsonl --layers 12 --format json
  fusebench project results/x.jsonl --fit-layers 2,4,6,8 --layers 12   (depth 12 held out)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from .args import positive_int
from .report import warn

FORMATS = ("text", "markdown", "json")


def depth_list(text: str) -> list[int]:
    """`2,4,6,8` -> [2, 4, 6, 8]."""
    try:
        depths = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated layer counts such as 2,4,6,8, got {text!r}"
        ) from None
    if not depths or depths[0] < 1:
        raise argparse.ArgumentTypeError(
            f"expected positive layer counts such as 2,4,6,8, got {text!r}"
        )
    return depths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results",
        nargs="+",
        type=Path,
        metavar="RESULTS.jsonl",
        help="results files holding each size at several depths (merged, as report merges them)",
    )
    parser.add_argument(
        "--layers",
        type=positive_int,
        metavar="N",
        help="project to N layers (default: each model's full depth)",
    )
    parser.add_argument(
        "--fit-layers",
        type=depth_list,
        metavar="D,D,...",
        help="fit on these depths only; the other measured depths are shown measured vs projected "
        "(a check of the projection on a depth it did not see)",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text (default), markdown, or json: a list of {size, variant, layers, prefill_tps, "
        "prefill_low, prefill_high, gen_tps, gen_low, gen_high, ...}",
    )


def main(args: argparse.Namespace, console: Console) -> int:
    from ..analysis.projection import project
    from ..analysis.study import build_study, resolve_comparisons
    from ..present.document import to_console, to_markdown
    from ..present.projection import blocks, to_json
    from .sources import load_results

    # Warnings to stderr: stdout carries only the projection (json or markdown may be piped on).
    errors = Console(stderr=True)
    study = build_study(load_results(args.results, warn=lambda message: warn(errors, message)))
    projection = project(study, resolve_comparisons((), study), args.layers, args.fit_layers)
    if args.format == "json":
        console.file.write(to_json(projection) + "\n")
    elif args.format == "markdown":
        console.file.write(to_markdown(blocks(projection), Path.cwd()))
    else:
        to_console(blocks(projection), console)
    return 0
