"""write the history as a static dashboard: per machine, every series over commits

Writes DIR/index.html: per machine, each experiment, cell and metric a panel of the tok/s and Δ
series over commits with their 95% intervals, steps (dashed) and single-run spikes (circled)
marked, and the drift since each anchor; every point links to its run's report, written beside it
(DIR/runs/RUN_ID/) from the results file the run was added from, where that file is still there.
No server: open the file, upload DIR as a CI artifact, or push it to a Pages branch
(.github/workflows/history.yml does both).

examples:
  fusebench publish site/
  fusebench publish site/ --store postgresql+pg8000://ci@db/fusebench
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from .history import add_store_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", type=Path, metavar="DIR", help="the folder to write the site to")
    add_store_argument(parser)


def main(args: argparse.Namespace, console: Console) -> int:
    from ..analysis.history import drifts, read_series
    from ..core.history import HistoryStore
    from ..present.dashboard import dashboard_html
    from ..present.run_reports import write_run_reports

    store = HistoryStore(args.store)
    runs = store.runs()
    series = read_series(runs, store.points())
    args.out.mkdir(parents=True, exist_ok=True)
    reports = write_run_reports(runs, args.out / "runs")
    page = args.out / "index.html"
    page.write_text(
        dashboard_html(series, drifts(series), lambda run_id: reports.get(run_id)),
        encoding="utf-8",
    )
    console.print(
        f"wrote {page}: {len(series)} series of {len(runs)} run(s), {len(reports)} run report(s)",
        highlight=False,
    )
    return 0
