"""The load sampler: what else ran while fusebench measured. Its figures are physical: never more cores than exist,
even when a worker process exits between two samples."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.measure.load import LoadSampler, preflight

linux_only = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc")


@linux_only
def test_workers_that_come_and_go_are_ours_not_other_processes():
    with LoadSampler(interval_s=0.2) as sampler:
        for _ in range(3):  # short-lived children, like worker processes between models
            subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    summary = sampler.summary()
    assert summary and summary["samples"] >= 2
    cores = os.cpu_count() or 1
    assert 0 <= summary["other_cores_max"] <= cores + 0.5
    assert 0 <= summary["steal_cores_max"] <= cores + 0.5


@linux_only
def test_preflight_reads_the_machine():
    before = preflight(0.2)
    assert set(before) == {"loadavg_1m", "cores", "other_cores", "steal_cores"}
    assert 0 <= before["other_cores"] <= (os.cpu_count() or 1) + 0.5
