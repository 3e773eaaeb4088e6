"""How well does a first run's plan scale the sizes it has not measured yet? (issue 64)

A machine's first run plans its time before its first timed round, from the first size's warm-up
alone: every other size's round is scaled by its roofline work (`scaling.Scale`). This replays
that on every committed sequential run of the main job's sizes, and the slow VM's
(../shared/data/slow-vm/default.jsonl; a file whose trials record no span counts a round as its
trials' clocks). The first size measured stands in
for what is known: as its warm-up round (on a machine's first run the kernels compile there,
once), as its first timed round (what a first run's second, settling warm-up round measures
since this benchmark was written) and as the mean of its timed rounds (a run whose cache holds
that size). Each other size's round is predicted through the product's own Scale, against the mean
round it measured; "8 rounds of each size" compares what the predicted rounds say the table's
rounds take with what they took.

    .venv/bin/python benchmarks/plan_scaling.py [--out FILE.md]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.core.spec import load_experiment  # noqa: E402
from fusebench.measure.machine.memory import model_config  # noqa: E402
from fusebench.measure.machine.roofline import cell_work  # noqa: E402
from fusebench.measure.run.planning import CellMeasure  # noqa: E402
from fusebench.measure.run.scaling import PlanWork, Scale  # noqa: E402

ROUNDS = 8  # the fewest a plan gives a size


def read(path: Path) -> list[dict]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as lines:
        return [json.loads(line) for line in lines if line.strip()]


def works() -> dict[str, object]:
    exp = load_experiment(ROOT / "experiments" / "default.yaml")
    return {m.preset: cell_work(model_config(m), 128, 3, 1) for m in exp.models}


def rounds_of(records: list[dict]) -> dict[str, dict[tuple[bool, int], list[dict]]]:
    """model -> (warm-up, round) -> its trials, for a sequential one-build run of pp128 tg3."""
    cells: dict[str, dict[tuple[bool, int], list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("kind") != "trial" or r.get("workload") != "pp128 tg3 b1":
            continue
        if r.get("build") != "current" or r.get("core") is not None or r.get("layers") != 2:
            return {}  # two builds, or a duet: another round
        cells[r["model"]][bool(r["warmup"]), r["round"]].append(r)
    return cells


def measure(trials_by_round: list[list[dict]], work) -> CellMeasure:
    """A cell's mean round (wall: its first trial's start to its last's end; its trials' clocks
    where a file from before trials recorded their span has none) and clocks."""
    walls, prefills, gens = [], [], []
    for trials in trials_by_round:
        prefills.append(sum(t["prefill_s"] for t in trials))
        # a warm-up of fewer decode steps than a round's (since 4842a89), scaled to the round's as
        # the runner scales it (CellWarmups._as_round)
        ran = sum(t["gen_s"] or 0.0 for t in trials)
        gens.append(sum(_as_round(t) for t in trials))
        if all(t.get("started_unix_s") for t in trials):
            ended = max(t["ended_unix_s"] for t in trials)
            walls.append(ended - min(t["started_unix_s"] for t in trials) + gens[-1] - ran)
        else:
            walls.append(prefills[-1] + gens[-1])
    n = len(trials_by_round[0])
    return CellMeasure(
        load_s=0.0,
        warmup_s=0.0,
        warmups=1,
        round_s=statistics.mean(walls),
        after_s=0.0,
        weight_bytes=0,
        round_flops=n * work.prefill_flops,
        round_bytes=n * work.gen_bytes,
        prefill_bytes=n * work.prefill_bytes,
        prefill_s=statistics.mean(prefills),
        gen_s=statistics.mean(gens),
    )


def _as_round(trial: dict) -> float:
    """A trial's generation seconds at a round's decode steps (its cell's gen_tokens − 1)."""
    steps, ran = trial["gen_tokens"] - 1, len(trial.get("step_s") or ())
    gen_s = trial["gen_s"] or 0.0
    return gen_s * steps / ran if ran and steps != ran else gen_s


def replay(path: Path, cell_works: dict) -> list[str]:
    cells = rounds_of(read(path))
    if len(cells) < 2 or any(m not in cell_works for m in cells):
        return []
    order = list(cells)  # the order the file holds the cells in, as a run measures them
    first = order[0]
    timed = {
        m: [ts for (warm, _), ts in sorted(rounds.items()) if not warm]
        for m, rounds in cells.items()
    }
    warm = [ts for (w, _), ts in cells[first].items() if w]
    if not warm or not all(timed.values()):
        return []
    actual = {m: measure(timed[m], cell_works[m]).round_s for m in cells}
    lines = []
    for known, label in (
        (warm[-1:], "warm-up round"),
        (timed[first][:1], "first timed round"),
        (timed[first], "timed rounds' mean"),
    ):
        scale = Scale.of([measure(known, cell_works[first])])
        assert scale is not None
        predicted = {}
        for model in cells:
            n = len(timed[model][0])
            w = cell_works[model]
            work = PlanWork(
                round_flops=n * w.prefill_flops,
                round_bytes=n * w.gen_bytes,
                prefill_bytes=n * w.prefill_bytes,
                weight_bytes=0,
                warmups=1,
                rows=4,
            )
            predicted[model] = scale.round_s(work)
        errors = ", ".join(
            f"{m.upper()} {predicted[m]:.1f} s ({100 * (predicted[m] / actual[m] - 1):+.0f}%)"
            for m in cells
            if m != first
        )
        said, took = ROUNDS * sum(predicted.values()), ROUNDS * sum(actual.values())
        lines.append(
            f"| {path.relative_to(ROOT.parent)} | {first.upper()}'s {label} | {errors} | "
            f"{said:.0f} s vs {took:.0f} s ({100 * (said / took - 1):+.0f}%) |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cell_works = works()
    rows = [
        line
        for path in [
            *sorted((ROOT / "results").rglob("*.jsonl.gz")),
            *sorted((ROOT.parent / "shared" / "data" / "slow-vm").glob("*.jsonl")),
        ]
        for line in replay(path, cell_works)
    ]
    text = "\n".join(
        [
            "| run | scaled from | each other size's round: predicted (vs measured) | "
            f"{ROUNDS} rounds of each size: predicted vs taken |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
