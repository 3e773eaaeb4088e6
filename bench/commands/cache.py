"""show or clear what fusebench keeps between runs on this machine

What a run keeps in ~/.cache/fusebench (XDG_CACHE_HOME honoured), and the disk it takes:
  weights        presets' seeded weights (safetensors), read back at twice the speed of making
                 them; the default experiment's four sizes at 2 layers in fp32 take about 24 GiB
  machine        what `auto` measured here: BLAS threads, schedule, peak (`env --probe` again)
  plans          each cell's measured round cost, spreads and op shares: what trials: plan plans
                 from, and the op shares a run of the same ops' code writes instead of timing
  kernels        MLX's compiled CPU kernels (mx.compile's C++ and libraries)
Clearing any of them is safe: the next run makes or measures again what it needs.

examples:
  fusebench cache                     what is kept, where, and its size
  fusebench cache --clear weights     free the weights' disk (the next run makes them again)
  fusebench cache --clear all         everything (the next run measures this machine again)
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from rich.console import Console

# What each part of the cache holds: its name, then the paths in the cache folder it covers.
PARTS = {
    "weights": ("weights",),
    "machine": ("threads-*.json", "schedule-*.json", "peak-*.json"),
    "plans": ("plan-*.json",),
    "kernels": ("tmp",),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--clear",
        choices=(*PARTS, "all"),
        help="delete one part of the cache, or all of it",
    )


def main(args: argparse.Namespace, console: Console) -> int:
    from ..measure.machine.env import cache_dir
    from ..present.document import Table, to_console
    from ..present.format import format_bytes

    folder = cache_dir()
    if args.clear:
        for part in PARTS if args.clear == "all" else (args.clear,):
            for path in _paths(folder, part):
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        console.print(f"cleared {args.clear} in {folder}", highlight=False)
    rows = tuple(
        (part, str(len(_paths(folder, part))), format_bytes(sum(map(_size, _paths(folder, part)))))
        for part in PARTS
    )
    to_console([Table(("part", "entries", "size"), rows)], console)
    console.print(f"in {folder}; `fusebench cache --clear PART` deletes one", highlight=False)
    return 0


def _paths(folder: Path, part: str) -> list[Path]:
    return sorted(path for pattern in PARTS[part] for path in folder.glob(pattern))


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
