"""Results files of every earlier format still report and check: the reader upgrades each record to
today's shape in one place (core.fileformat.upgrade). The fixtures are committed results files (or
their first lines): format 1, the first build's (ci-runs/ci-01.jsonl, and 41 lines of the first ops
run); format 2, roofline fields and the machine's peak (ci-runs/calibrate-01.jsonl); format 3 before
the header named it, a `run --against` file (gate-ab/budget-85s/s10-02-confirm.jsonl)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import cell, fusebench_here, results_file, trials

from fusebench.core.fileformat import FORMAT, ResultsError, header_format
from fusebench.core.results import ResultsWriter, read_results

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "results"
# fixture -> its format, and the exit `fusebench check` gives it (the A/B file: 3 rounds, every
# row's interval reaching across the limit: cannot tell, exit 3, never a pass)
RUNS = {"format1-run.jsonl": (1, 0), "format2-run.jsonl": (2, 0), "format3-ab.jsonl": (3, 3)}


def header_of(path: Path) -> dict:
    return json.loads(path.read_text().splitlines()[0])


@pytest.mark.parametrize("name", [*RUNS, "format1-ops.jsonl"])
def test_every_earlier_format_is_read_in_todays_shape(name: str):
    path = FIXTURES / name
    assert "format" not in header_of(path)  # inferred from what the header holds
    assert header_format(header_of(path)) == RUNS.get(name, (1, 0))[0]
    results = read_results([path])
    header = next(iter(results.runs.values()))
    assert header["format"] == FORMAT and "threads" in header["env"]
    if name != "format1-ops.jsonl":
        assert header["builds"]["current"]["commit"] == header["env"]["git_commit"]
        assert all(r["build"] in ("current", "reference") for r in results.of_kind("trial"))


@pytest.mark.parametrize("name", [*RUNS, "format1-ops.jsonl"])
def test_every_earlier_format_reads_back_as_types(name: str):
    results = read_results([FIXTURES / name])
    header, run = next(iter(results.runs.values())), next(iter(results.headers.values()))
    assert (run.run_id, run.format) == (header["run_id"], FORMAT)
    assert run.env.threads == header["env"]["threads"]
    assert run.experiment and run.experiment.content == header["experiment"]["content"]
    assert run.env.blas_family == header["env"]["blas"].split(" (")[0]
    for name, build in header.get("builds", {}).items():
        assert (run.builds[name].commit, run.builds[name].dirty) == (
            build["commit"],
            build["dirty"],
        )
    assert (run.peak is None) == (header.get("peak") is None)


@pytest.mark.parametrize("name", [*RUNS, "format1-ops.jsonl"])
def test_every_earlier_format_reports(name: str, tmp_path: Path):
    done = fusebench_here("report", str(FIXTURES / name), "--out", "report", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and (tmp_path / "report" / "report.md").is_file()


@pytest.mark.parametrize("name", RUNS)
def test_every_earlier_format_checks(name: str, tmp_path: Path):
    done = fusebench_here("check", str(FIXTURES / name), cwd=tmp_path)
    assert done.returncode == RUNS[name][1], done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_an_old_experiment_that_todays_parser_rejects_still_reports(tmp_path: Path):
    """A key the schema no longer knows: the run's trials report, its comparisons taken from the
    variants."""
    lines = (FIXTURES / "format1-run.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header["experiment"]["content"] += "retired_key: 1\n"
    (tmp_path / "old.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    done = fusebench_here("report", "old.jsonl", "--out", "report", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "stored experiment not read by this fusebench" in markdown and "retired_key" in markdown
    assert "### baseline → compiled" in markdown and "### baseline → sdpa" in markdown


def test_the_writer_names_todays_format_and_a_newer_one_is_refused(tmp_path: Path):
    experiment = (
        "name: t\nmodels: [{preset: tiny}]\nvariants: {a: {}}\n"
        "workloads: {prompt_tokens: 4, gen_tokens: 2}\n"
    )
    path = results_file(
        tmp_path / "r.jsonl", trials(cell(), {"a": [(10.0, 1.0)]}), experiment=experiment
    )
    assert header_of(path)["format"] == FORMAT
    newer = tmp_path / "newer.jsonl"
    newer.write_text(json.dumps({**header_of(path), "format": FORMAT + 1}) + "\n")
    with pytest.raises(ResultsError, match=f"newer.jsonl:1: .*format {FORMAT + 1} is newer"):
        read_results([newer])


@pytest.mark.parametrize("name", list(RUNS))
def test_a_compressed_results_file_reads_as_the_plain_one(name: str, tmp_path: Path):
    plain = FIXTURES / name
    packed = tmp_path / f"{name}.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_results([packed]).records == read_results([plain]).records
    junk = tmp_path / "junk.jsonl.gz"
    junk.write_bytes(packed.read_bytes()[:10] + b"not deflate")
    with pytest.raises(ResultsError, match=r"junk\.jsonl\.gz: cannot read"):
        read_results([junk])


def test_a_compressed_file_written_record_by_record_survives_a_cut_and_a_resume(tmp_path: Path):
    lines = (FIXTURES / "format3-ab.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    packed = tmp_path / "r.jsonl.gz"
    writer = ResultsWriter(packed)
    for record in records[:-1]:
        writer.write(record)
    # A run killed here: every record is on disk, the gzip trailer is not.
    cut = packed.read_bytes()
    writer.close()
    packed.write_bytes(cut)
    assert read_results([packed]).records == read_results_of(records[:-1], tmp_path)
    with ResultsWriter(packed) as resumed:  # `run --resume`: the cut stream is made whole first
        resumed.write(records[-1])
    assert gzip.decompress(packed.read_bytes()).decode().splitlines() == [
        json.dumps(record) for record in records
    ]


def read_results_of(records: list[dict], tmp_path: Path) -> list[dict]:
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps(record) + "\n" for record in records))
    return read_results([plain]).records
