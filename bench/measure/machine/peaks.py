"""This machine's peaks under the current backend and BLAS: an fp32 matmul's GFLOP/s, a memory
copy's GB/s and an LM-head-sized matrix-vector read's GB/s, what the roofline holds trials against
(measure.machine.roofline). Run in a process started as a worker is (measure.machine.probe)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ...core.header import PeakProbe

_COPY_BYTES = 256 * 2**20
_MATMUL_SIZES = (256, 2048)  # clamp for the adaptive matmul size
# Gemma 4's vocabulary by E2B's hidden size: the LM head's read
_LM_HEAD_ROWS, _LM_HEAD_COLS = 262144, 1536


def _best_seconds(mx: Any, make: Callable[[], Any], budget_s: float, min_reps: int = 3) -> float:
    """Fastest of repeated evaluations: noise only ever slows a run down, so the minimum is the
    peak."""
    start = time.perf_counter()
    mx.eval(make())  # warmup: first use pays for allocation and page faults
    # warmup counts against the budget
    best, spent, reps = float("inf"), time.perf_counter() - start, 0
    while reps < min_reps or spent < budget_s:
        start = time.perf_counter()
        mx.eval(make())
        elapsed = time.perf_counter() - start
        best, spent, reps = min(best, elapsed), spent + elapsed, reps + 1
    return best


def _matmul_size(mx: Any, target_s: float) -> int:
    """Largest square size (multiple of 256) whose matmul takes about target_s, from a small trial.

    Reference BLAS is ~30x slower than OpenBLAS, so a fixed size is either too slow or too small.
    """
    n0 = _MATMUL_SIZES[0]
    a = mx.random.normal((n0, n0))
    mx.eval(a)
    flops_per_s = 2 * n0**3 / _best_seconds(mx, lambda: a @ a, 0.0, min_reps=2)
    n = int((target_s * flops_per_s / 2) ** (1 / 3)) // 256 * 256
    return max(_MATMUL_SIZES[0], min(_MATMUL_SIZES[1], n))


def probe_peaks(seconds: float = 3.0) -> PeakProbe:
    """fp32 matmul GFLOP/s and memory copy GB/s under the current backend and BLAS, in about
    `seconds`."""
    import mlx.core as mx

    # ~40% of the budget each for matmul and copy; the rest goes to sizing and allocation.
    n = _matmul_size(mx, target_s=seconds / 10)
    a, b = mx.random.normal((n, n)), mx.random.normal((n, n))
    x = mx.ones((_COPY_BYTES // 4,), dtype=mx.float32)
    mx.eval(a, b, x)
    # Decode streams each weight matrix once through a matrix-vector product: that read rate, not an
    # elementwise copy, is the bandwidth roof a generation step can reach. Its biggest read is the
    # tied LM head, 262144 x hidden (1.5 GiB at E2B's 1536 in fp32), which streams faster than a
    # small matrix (a 256 MiB probe read less than E2B's decode steps achieved), so the probe reads
    # one of that size, as `v @ w.T` like the head.
    w, v = (
        mx.ones((_LM_HEAD_ROWS, _LM_HEAD_COLS), dtype=mx.float32),
        mx.ones((1, _LM_HEAD_COLS), dtype=mx.float32),
    )
    mx.eval(w, v)
    matmul_s = _best_seconds(mx, lambda: a @ b, 0.3 * seconds, min_reps=5)
    # `+ 0` reads x and writes a new array
    copy_s = _best_seconds(mx, lambda: x + 0, 0.25 * seconds, min_reps=5)
    gemv_s = _best_seconds(mx, lambda: v @ w.T, 0.25 * seconds, min_reps=5)
    return PeakProbe(
        matmul_gflops=round(2 * n**3 / matmul_s / 1e9, 1),
        matmul_shape=f"{n}x{n} @ {n}x{n} fp32",
        copy_gbps=round(2 * _COPY_BYTES / copy_s / 1e9, 2),  # bytes read + bytes written
        copy_bytes=_COPY_BYTES,
        gemv_read_gbps=round(w.nbytes / gemv_s / 1e9, 2),
    )
