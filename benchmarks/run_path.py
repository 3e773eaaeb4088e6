"""How far a reader follows an experiment through the house: the modules the coordinator's calls
pass through from `commands/run.py` to the first trial it writes, in the order it first enters each,
how often each is entered from another one (a call across modules is a place a reader turns a
page), and how often a module is called back: entered from a module it is itself waiting on,
further down the same call stack (the runner called from a cell's run), which makes a reader go
back up the path.

The coordinator runs a tiny experiment (the tiny preset, two variants, two rounds, sequential) in
this process under a profile hook that notes every call from one module of bench/ or models/ into
another, until the results file receives its first trial record. The workers are other processes
and are not followed: their path is the worker protocol.

    python benchmarks/run_path.py [--show]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

from fusebench.commands import main
from fusebench.core.results import ResultsWriter

EXPERIMENT = """\
name: run-path
models: [{preset: tiny, layers: 2}]
variants:
  baseline: {geglu: unfused}
  compiled: {geglu: compiled}
workloads: {prompt_tokens: 16, gen_tokens: 2}
trials: 2
warmup: 1
schedule: sequential
threads: 1
"""
ROOT = Path(__file__).resolve().parent.parent
RUN_COMMAND = "bench/commands/run.py"


def module_of(filename: str) -> str | None:
    """The repository module a code object belongs to (bench/measure/run/runner.py), else None."""
    path = Path(filename).resolve()
    if not path.is_relative_to(ROOT) or path.parts[len(ROOT.parts)] not in ("bench", "models"):
        return None
    return str(path.relative_to(ROOT))


def trace_run(folder: Path) -> tuple[Counter[str], Counter[str]]:
    """Each module entered from another, and how often (in the order first entered), and how often
    each was called back from below, until the first trial is written."""
    entered: Counter[str] = Counter()
    called_back: Counter[str] = Counter()
    first_trial = []
    write = ResultsWriter.write

    def noting_write(self: ResultsWriter, record: object) -> None:
        kind = record.get("kind") if isinstance(record, dict) else getattr(record, "KIND", None)
        if not first_trial and kind == "trial":
            first_trial.append(True)
            sys.setprofile(None)
        write(self, record)  # type: ignore[arg-type]

    def hook(frame, event, _arg):  # sys.setprofile's signature
        # function calls only: an import runs a module's body, which is not a step of the run
        if event != "call" or frame.f_back is None or frame.f_code.co_name == "<module>":
            return
        callee = module_of(frame.f_code.co_filename)
        caller = module_of(frame.f_back.f_code.co_filename)
        if not entered and callee == RUN_COMMAND and frame.f_code.co_name == "main":
            entered[callee] += 1  # the path starts where `fusebench run` does
        elif entered and callee and caller and callee != caller:
            entered[callee] += 1
            if callee in _waiting(frame.f_back.f_back):
                called_back[callee] += 1

    ResultsWriter.write = noting_write  # type: ignore[method-assign]
    experiment = folder / "run-path.yaml"
    experiment.write_text(EXPERIMENT)
    sys.setprofile(hook)
    try:
        code = main(["run", str(experiment), "--out", str(folder / "r.jsonl"), "--quiet"])
    finally:
        sys.setprofile(None)
        ResultsWriter.write = write  # type: ignore[method-assign]
    if code != 0 or not first_trial:
        raise SystemExit(f"the run exited {code} before its first trial")
    return entered, called_back


def _waiting(frame) -> set[str]:
    """The repository modules with a frame on the stack from `frame` down."""
    modules = set()
    while frame is not None:
        if module := module_of(frame.f_code.co_filename):
            modules.add(module)
        frame = frame.f_back
    return modules


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--show", action="store_true", help="list each module, its entries and call-backs"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        entered, called_back = trace_run(Path(folder))
    print(f"{len(entered)} modules from commands/run.py to the first trial")
    print(f"measure/run/runner.py entered {entered['bench/measure/run/runner.py']} times")
    print(f"{sum(called_back.values())} call-backs into {len(called_back)} modules")
    if args.show:
        print("entries  call-backs  module (in the order first entered)")
        for module, times in entered.items():
            print(f"{times:7d}  {called_back[module]:10d}  {module}")


if __name__ == "__main__":
    main_()
