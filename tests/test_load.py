"""The load sampler: what else ran while fusebench measured. Its figures are physical: never more
cores than exist, even when a worker process exits between two samples."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from fusebench.measure.machine.load import LoadSampler, _cpu_times, preflight

linux_only = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc")


def _short_lived_child() -> None:  # like a worker process between models
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)


@linux_only
def test_workers_that_come_and_go_are_ours_not_other_processes():
    # Deterministic: the kernel's own count of the children's CPU time must show up as ours,
    # whatever else runs.
    before, children_before = _cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(3):
        _short_lived_child()
    after, children_after = _cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN)
    children_s = sum(
        getattr(children_after, f) - getattr(children_before, f) for f in ("ru_utime", "ru_stime")
    )
    # /proc counts in clock ticks, rusage in µs
    assert after.ours - before.ours >= children_s - 3 * 0.01


@linux_only
def test_sampled_figures_are_physical():
    cores = os.cpu_count() or 1
    with LoadSampler(min_interval_s=0.0) as sampler:
        for _ in range(2):  # a worker between models, then a reading as a step ends
            _short_lived_child()
            sampler.read()
    summary = sampler.summary()
    assert summary.samples >= 2
    assert 0 <= summary.other_cores_max <= cores + 0.5
    assert 0 <= summary.steal_cores_max <= cores + 0.5
    assert 0 <= summary.other_cores_mean <= summary.other_cores_max


@linux_only
def test_a_reading_sooner_than_the_interval_waits_for_the_next():
    # Readings an hour apart at least: these two come sooner, so neither makes a sample.
    with LoadSampler(min_interval_s=3600.0) as sampler:
        sampler.read()
        sampler.read()
    assert sampler.samples == []
    assert sampler.summary().samples == 0


@linux_only
def test_preflight_reads_the_machine():
    before = preflight(0.2)
    assert before is not None and before.cores == os.cpu_count()
    assert 0 <= before.other_cores <= (os.cpu_count() or 1) + 0.5
