"""Digests of what `fusebench report` writes for a results file (report.md, summary.csv,
deltas.csv), so a change to how records are declared, written or read can be shown to leave every
report byte-identical.

Run as a script to print the digests of the files named, as JSON:
    python tests/golden_reports.py results/*.jsonl > /tmp/digests.json
tests/test_report_golden.py holds a few files' digests against tests/fixtures/report-digests.json.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import sys
import tempfile
from pathlib import Path

from fusebench.analysis.study import build_study, resolve_comparisons
from fusebench.commands.sources import load_results
from fusebench.present.report import write_report

# Only the text files: PNG bytes depend on matplotlib's version, not on the records.
DIGESTED = ("report.md", "summary.csv", "deltas.csv")
# A CSV's full-precision floats differ in their last bits between CPUs and numpy builds (a sum's
# order under another SIMD width): digested at 10 significant digits, far below any printed figure.
_FLOAT = re.compile(r"-?\d+\.\d*(e[-+]?\d+)?$|-?\d+e[-+]?\d+$")


def _canonical(name: str, data: bytes) -> bytes:
    if not name.endswith(".csv"):
        return data
    rows = csv.reader(io.StringIO(data.decode()))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow([f"{float(c):.10g}" if _FLOAT.match(c) else c for c in row])
    return out.getvalue().encode()


def report_digests(path: Path) -> dict[str, str]:
    """sha256 of each text file the report of `path` writes (absent ones left out)."""
    with tempfile.TemporaryDirectory() as out:
        study = build_study(load_results([path]))
        write_report(study, resolve_comparisons([], study), Path(out), sources=[path])
        return {
            name: hashlib.sha256(_canonical(name, (Path(out) / name).read_bytes())).hexdigest()
            for name in DIGESTED
            if (Path(out) / name).exists()
        }


if __name__ == "__main__":
    digests = {}
    for name in sys.argv[1:]:
        try:
            digests[name] = report_digests(Path(name))
        except Exception as error:
            digests[name] = {"error": f"{type(error).__name__}: {error}"}
        print(name, file=sys.stderr)
    print(json.dumps(digests, indent=1, sort_keys=True))
