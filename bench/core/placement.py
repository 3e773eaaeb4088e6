"""Where a worker process started: its placement, a `worker` record per process.

Two builds' workers must start alike so that only their code differs (docs/gate.md, "Placement"):
the same interpreter and launcher, the same environment, trees in equivalent places. The runner
records what it gave each worker and what the OS says of it, so a report can show any difference
between the builds' placements instead of leaving it to be guessed from a Δ."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

# The environment variables whose values are recorded (others by name and size only): what sets a
# worker's threads, what it preloads and how Python hashes.
RECORDED_VALUES = (
    "LD_PRELOAD",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "PYTHONHASHSEED",
    "MLX_DISABLE_COMPILE",
)


@dataclass(frozen=True)
class Placement:
    """How one worker process was started and where it runs; the same for both builds' workers
    in a symmetric A/B, but for `tree` and `slot`."""

    interpreter: str  # the Python that runs it
    launcher: str  # the launcher script (measure/launch.py of the runner's build)
    tree: str  # the fusebench tree it imports: its cwd too
    tree_chars: int  # the length of that path (the stack's start moves with argv's size)
    slot: str = ""  # the place's name among the run's places ("" outside one)
    filesystem: str = ""  # the tree's filesystem: type and device
    argv_bytes: int = 0  # the command line's size
    env_bytes: int = 0  # the environment's size, NAME=value plus NUL each
    env_names: tuple[str, ...] = ()  # the variables set, by name
    env_values: dict[str, str] = field(default_factory=dict)  # RECORDED_VALUES that are set
    cpus: tuple[int, ...] = ()  # where the OS lets it run at its start (empty: unknown)


@dataclass(frozen=True, kw_only=True)
class WorkerRecord:
    """One worker process of a run: which build, which model, which of the cell's worker pairs
    (`pair`, counted through the run) and in what turn it started, and its placement."""

    KIND: ClassVar[str] = "worker"

    run_id: str
    model_key: str
    build: str
    process: int  # the pair's label, as its trials carry it: the pair's first worker's pid
    pid: int
    pair: int
    started: int  # 0: started first of its pair
    placement: Placement


# What may differ between two builds' workers in a symmetric A/B: where each tree is (and so the
# path's characters, though not their number).
EXPECTED_TO_DIFFER = ("tree", "slot")
