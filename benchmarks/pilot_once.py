"""One `schedule: auto` pilot (measure.run.pilot.pilot) of the fusebench tree in the current folder,
and the choice it makes, as one JSON line: to compare the pilot of two trees, or a pilot with an A/A
of `ci` in each schedule (benchmarks/duet_aa.py), on the same machine. Nothing is cached.

    cd TREE && python /path/to/benchmarks/pilot_once.py LABEL >> pilots.jsonl
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from own_tree import use_tree

use_tree(Path.cwd())  # the tree being compared, not this file's

from fusebench.measure.machine.cores import duet_cores  # noqa: E402
from fusebench.measure.machine.probe import worker_environment  # noqa: E402
from fusebench.measure.run.pilot import decide, pilot  # noqa: E402


def main() -> None:
    worker_env, _, threads = worker_environment("auto", None)
    cores = duet_cores()
    if cores is None:
        sys.exit("pilot_once: this machine has no two physical cores to pilot a duet on")
    began = time.time()
    probes = pilot(worker_env, cores, threads.threads)
    choice = decide(probes, cores, threads.threads)
    line = {
        "tree": sys.argv[1] if len(sys.argv) > 1 else str(Path.cwd()),
        "s": round(time.time() - began, 1),
        "threads": threads.threads,
        "probes": [asdict(probe) for probe in probes],
        "schedule": choice.schedule,
        "reason": choice.reason,
        "clock": choice.clock,
        "clock_reason": choice.clock_reason,
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
