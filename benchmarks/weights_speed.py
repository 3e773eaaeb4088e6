"""How fast a preset's seeded weights come to be in a worker: generated (as fusebench.models.loading
does now, and as it did before 2026-12-04) or read back from a safetensors file a cache would hold.

Each way runs in a fresh process (a worker's situation: its memory is new to it), the ways taking
turns, `--repeats` times each, on one preset at 2 layers in fp32:
- tiled: the pool tiled and sliced (before 2026-12-04: every value written twice)
- concatenated: the pool's tail, whole pools and its head concatenated (now: written once)
- concatenated, huge pages: the same with glibc's malloc asked for transparent huge pages
  (GLIBC_TUNABLES=glibc.malloc.hugetlb=1), so a fresh page costs one fault per 2 MiB, not 4 KiB
- safetensors: mx.load of the same weights saved once (in the page cache: a warm cache's best case)

    .venv/bin/python benchmarks/weights_speed.py --preset 26b --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import own_tree  # noqa: F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.measure.machine.env import child_command

CHILD = r"""
import sys, time, zlib
import mlx.core as mx
from mlx.utils import tree_flatten
import fusebench.models.loading as loading
from fusebench.models.config import Overrides, preset_config

way, preset, saved = sys.argv[1], sys.argv[2], sys.argv[3]
if way == "tiled":
    def tiled(pool, name, size):
        start = zlib.crc32(name.encode()) % loading._POOL_SIZE
        repeats = (start + size) // loading._POOL_SIZE + 1
        return mx.tile(pool, (repeats,))[start : start + size]
    loading._pool_slice = tiled
model = loading.build_model(preset_config(preset, Overrides(2, None, None)))
began = time.perf_counter()
if way == "safetensors":
    weights = mx.load(saved)
    mx.eval(list(weights.values()))
    size = sum(v.nbytes for v in weights.values())
elif way == "save":
    loading.seed_weights(model, 0, mx.float32)
    mx.save_safetensors(saved, dict(tree_flatten(model.parameters())))
    size = 0
else:
    loading.seed_weights(model, 0, mx.float32)
    size = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
print(time.perf_counter() - began, size)
"""

WAYS = ("tiled", "concatenated", "concatenated, huge pages", "safetensors")


def run(way: str, preset: str, saved: Path) -> tuple[float, int]:
    env = dict(os.environ)
    if way == "concatenated, huge pages":
        env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    child = "concatenated" if way.startswith("concatenated") else way
    done = subprocess.run(
        [*child_command("-c"), CHILD, child, preset, str(saved)],  # this tree, as a worker
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, size = done.stdout.split()
    return float(seconds), int(size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="26b")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        saved = Path(folder) / "weights.safetensors"
        run("save", args.preset, saved)
        times: dict[str, list[float]] = {way: [] for way in WAYS}
        size = 0
        for _ in range(args.repeats):
            for way in WAYS:
                seconds, size = run(way, args.preset, saved)
                times[way].append(seconds)
    print(
        f"{args.preset} at 2 layers, fp32: {size / 2**30:.2f} GiB; {args.repeats} fresh processes"
    )
    print("| way | seconds (each) | median | GB/s |")
    print("|---|---|---|---|")
    for way, seconds in times.items():
        middle = statistics.median(seconds)
        each = ", ".join(f"{s:.1f}" for s in seconds)
        print(f"| {way} | {each} | {middle:.1f} | {size / middle / 1e9:.2f} |")


if __name__ == "__main__":
    main()
