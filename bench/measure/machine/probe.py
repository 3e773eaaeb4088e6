"""Facts about the workers' environment, measured in a process started exactly as a worker is (same
interpreter, same BLAS preload): `python -m fusebench.measure.machine.probe env|peaks` prints one
JSON object.

The parent process cannot measure these itself: LD_PRELOAD acts only at process start, so the BLAS
the parent maps is not the one its workers use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ...core.header import Env, PeakProbe
from ...core.typed import from_mapping, to_mapping
from .env import blas_preload_env, child_command, collect_env, thread_env
from .peaks import probe_peaks
from .threads import ThreadChoice, choose_threads

PROBES: dict[str, Callable[[], Env | PeakProbe]] = {"env": collect_env, "peaks": probe_peaks}


def _probe_in(env: dict[str, str], what: str) -> Any:
    """The JSON object probe `what` prints, run in a fresh process with environment `env`."""
    done = subprocess.run(
        [*child_command(__name__), what],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def probe_env(env: dict[str, str]) -> Env:
    """What a process started with environment `env` really loads (collect_env there)."""
    return from_mapping(Env, _probe_in(env, "env"))


def probe_peaks_in(env: dict[str, str]) -> PeakProbe:
    """This machine's matmul and memory peaks under environment `env`'s BLAS and threads
    (probe_peaks there)."""
    return from_mapping(PeakProbe, _probe_in(env, "peaks"))


def worker_environment(
    blas: str,
    threads: int | None = None,
    fresh: bool = False,
    measuring: AbstractContextManager[None] | None = None,
) -> tuple[dict[str, str], Env, ThreadChoice]:
    """The workers' environment (an optimized BLAS preloaded when there is one, its threads limited
    to `threads`, or with None to the count measure.machine.threads chooses on this machine,
    measured again when `fresh`), what a process started with it really loads, and how the thread
    count was chosen. `measuring` times the thread choice (a machine's one-time measurement) apart
    from the probes every run makes."""
    env, _ = blas_preload_env(blas, os.environ)
    if threads is not None:
        env = thread_env(env, threads)
        return env, probe_env(env), ThreadChoice(threads, reason="")
    probed = probe_env(env)
    with measuring or nullcontext():
        choice = choose_threads(env, probed, fresh=fresh)
    env = thread_env(env, choice.threads)
    return env, probe_env(env), choice


def auto_threads(blas: str = "auto") -> int:
    """The thread count `threads: auto` gives workers on this machine (measured once, then
    cached)."""
    env, _ = blas_preload_env(blas, os.environ)
    return choose_threads(env, probe_env(env)).threads


def main() -> None:
    print(json.dumps(to_mapping(PROBES[sys.argv[1]]())))


if __name__ == "__main__":
    main()
