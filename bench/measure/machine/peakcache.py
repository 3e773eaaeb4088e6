"""The machine's peak, cached: the roof each cell is held against, measured once per machine
fingerprint and BLAS thread count (measure.machine.peaks, in a child process), or the known chip
on a GPU; raised where a run achieves more."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...core.header import Env, PeakProbe
from .env import cache_dir, machine_key, read_cached, write_cached
from .probe import probe_peaks_in
from .roofline import Peak, Rates, peak_for


def peak_cache_path(env: Env) -> Path:
    # v3: keyed by machine_key, so two VMs of one CPU name (AVX-512 or not) keep their own peaks.
    return cache_dir() / f"peak-v3-{machine_key(env)}-t{env.threads}.json"


def cached_peak(env: Env) -> Peak | None:
    """The peak measured_peak gives, where it needs no probe; None where it would measure."""
    if env.backend != "cpu":
        return peak_for(env)
    probe = read_cached(peak_cache_path(env), PeakProbe)
    return peak_for(env, probe) if probe else None


def measured_peak(worker_env: dict[str, str], env: Env) -> Peak | None:
    """The roof to hold each cell against. On a GPU, the known chip. On a CPU, measured under the
    workers' BLAS and thread count, best of several repeats, and cached per machine fingerprint and
    thread count (the cache is raised when a run achieves more: see raise_cached_peak)."""
    if env.backend == "cpu" and cached_peak(env) is None:
        write_cached(peak_cache_path(env), probe_peaks_in(worker_env))
    return cached_peak(env)


def raise_cached_peak(env: Env, best: Rates, metrics: set[str]) -> str:
    """After a run that achieved more than the cached peak: the machine can do at least what it did,
    so the cached peak is raised to it, and later runs hold their trials against that."""
    path = peak_cache_path(env)
    probe = read_cached(path, PeakProbe)
    if probe is None:
        return f"peak underestimated: {', '.join(sorted(metrics))} exceeded the measured peak"
    raised = replace(
        probe,
        matmul_gflops=max(probe.matmul_gflops, 1000 * best.prefill_tflops),
        gemv_read_gbps=max(probe.gemv_read_gbps, best.gen_gbps or 0.0),
        raised_by_a_run=True,
    )
    write_cached(path, raised)
    return (
        f"peak underestimated: {', '.join(sorted(metrics))} exceeded this machine's measured "
        f"peak; those trials show no percentage, and the cached peak ({path}) is raised to what "
        "this run achieved"
    )
