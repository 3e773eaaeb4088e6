"""The machine's own noise floor: how much two identical pieces of work, run back to back, differ
in time, at trial lengths from milliseconds to seconds. No fusebench code runs; what it measures
bounds what any paired A/B on this machine can resolve in a given time.

Each line alternates two identical units of work (a pure-Python loop, or a memory-bound MLX
reduction) for SECONDS, in trials of one length, and reports the SD of log(second/first) over the
pairs and the SD of their mean over that time (white noise: pair SD / sqrt(pairs)). Where the pair
SD does not shrink as trials lengthen, the noise is not averaged away inside a trial, and short
trials buy the most precision per second.

    python benchmarks/machine_noise.py --out results/machine-noise/NAME.md
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx

SECONDS = 30.0
LENGTHS_S = (0.005, 0.05, 0.5, 2.0)


def python_loop(iterations: int) -> None:
    total = 0
    for i in range(iterations):
        total += i * i


def memory_sweep(repeats: int, data: mx.array) -> None:
    for _ in range(repeats):
        mx.eval(data.sum())


def calibrated(work: Callable[[int], None], length_s: float) -> int:
    """The work's count whose run takes about length_s, scaled from one run of over 20 ms."""
    count = 1
    while True:
        start = time.perf_counter()
        work(count)
        took = time.perf_counter() - start
        if took > 0.02:
            return max(1, round(count * length_s / took))
        count *= 4


def pair_noise(work: Callable[[int], None], count: int, seconds: float) -> tuple[int, float, float]:
    """(pairs, SD of log pair ratio, mean trial seconds) over `seconds` of alternation."""
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 8:
        start = time.perf_counter()
        work(count)
        times.append(time.perf_counter() - start)
    ratios = [math.log(times[i + 1] / times[i]) for i in range(0, len(times) - 1, 2)]
    return len(ratios), statistics.stdev(ratios), statistics.mean(times)


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    names = [ln.split(":", 1)[1].strip() for ln in text.splitlines() if "model name" in ln]
    model = names[0] if names else platform.machine()
    avx512 = "avx512" in text
    return f"{model}, {'AVX-512' if avx512 else 'no AVX-512'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=SECONDS, help="per line (default 30)")
    args = parser.parse_args()
    mx.set_default_device(mx.cpu)
    data = mx.ones((16 * 1024 * 1024,))  # 64 MiB of fp32: past any cache
    mx.eval(data)
    kinds: dict[str, Callable[[int], None]] = {
        "python loop": python_loop,
        "MLX 64 MiB sum": lambda n: memory_sweep(n, data),
    }
    lines = [
        f"# Machine noise: {platform.node()}",
        "",
        f"{cpu_flags()}; mlx {mx.__version__}; "
        f"`python benchmarks/machine_noise.py --seconds {args.seconds:g}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| work | trial | pairs | SD of log(pair ratio) | SD of the mean over the line |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, work in kinds.items():
        for length in LENGTHS_S:
            count = calibrated(work, length)
            pairs, sd, mean_s = pair_noise(work, count, args.seconds)
            line = (
                f"| {name} | {mean_s * 1e3:.1f} ms | {pairs} | {sd * 100:.1f}% "
                f"| {sd / math.sqrt(pairs) * 100:.2f}% |"
            )
            print(line, flush=True)
            lines.append(line)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
