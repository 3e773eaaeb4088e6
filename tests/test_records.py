"""Each record kind is declared once (core.header, core.cell, core.fileformat): the dataclass the
writers fill is the one the readers get back, so the two cannot drift apart, and the results format
stays what it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fusebench.core.cell import (
    CellFields,
    Measured,
    PeakPercents,
    Rates,
    ShareRecord,
    Trial,
    TrialRecord,
)
from fusebench.core.fileformat import COLUMN_RECORDS, REQUIRED_FIELDS, Column
from fusebench.core.header import RunHeader
from fusebench.core.results import read_results
from fusebench.core.typed import from_mapping, to_mapping, to_record, written_fields

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Columns a results frame adds to the records (core.results.Results.frame,
# analysis.stats.timed_trials): no record holds them.
DERIVED = {Column.MACHINE, Column.TRIALS, Column.CLOCK, Column.PREFILL_CPU_TPS}
DERIVED |= {Column.GEN_CPU_TPS}
CELL = CellFields(
    run_id="run1",
    cell="e2b|pp8 tg2 b1",
    model="e2b",
    model_key="e2b",
    size="E2B",
    layers=2,
    dtype="float32",
    quantize=None,
    prompt_tokens=8,
    gen_tokens=2,
    batch=1,
    workload="pp8 tg2 b1",
)
MEASURED = Measured(
    prefill_s=0.1, prefill_tps=80.0, gen_s=0.1, gen_tps=10.0, step_s=(0.1,), prefill_cpu_s=0.09
)
TRIAL = TrialRecord(
    cell=CELL,
    trial=Trial(variant="base", ops={"geglu": "unfused"}, round=0, warmup=False, measured=MEASURED),
    rates=Rates(prefill_tflops=0.1, gen_gbps=2.0),
    of_peak=PeakPercents(prefill_pct_of_peak=10.0, gen_pct_of_peak=20.0),
    process=0,
)


def test_every_column_is_a_field_of_a_declared_record_or_derived_from_them():
    declared = {key for kind in COLUMN_RECORDS for key in written_fields(kind)}
    assert {str(c) for c in Column} - declared == {str(c) for c in DERIVED}
    assert Column.PREFILL_TPS == "prefill_tps" and Column.GEN_CPU_TPS == "gen_cpu_tps"


def test_a_trial_reads_back_as_it_was_written():
    written = json.loads(json.dumps(to_record(TRIAL)))
    assert from_mapping(TrialRecord, written) == TRIAL
    assert list(written) == ["kind", *written_fields(TrialRecord)]


def test_the_fields_readers_require_are_those_they_always_did():
    # the trial's own (the frames key on these), and every record of the kind carries its cell's
    assert set(REQUIRED_FIELDS["trial"]) == {
        "run_id", "cell", "model_key", "size", "workload", "prompt_tokens", "gen_tokens", "batch",
        "variant", "round", "warmup", "prefill_tps", "gen_tps",
    }  # fmt: skip
    assert set(REQUIRED_FIELDS["op"]) == {
        "run_id", "op", "variant", "reference", "shape_label", "round", "seconds", "bytes",
        "flops", "max_abs_err",
    }  # fmt: skip


@pytest.mark.parametrize("name", ["results/format3-ab.jsonl", "slow-vm/default.jsonl"])
def test_todays_writer_writes_every_field_a_committed_file_holds(name):
    """The format did not change: each kind's record as written today holds every key the same
    kind held in a committed file (today's may hold more: optional fields added since)."""
    results = read_results([FIXTURES / name])
    for kind, declared in (("trial", TrialRecord), ("share", ShareRecord), ("run", RunHeader)):
        for record in results.of_kind(kind):
            assert set(record) - {"kind"} <= set(written_fields(declared)), kind


@pytest.mark.parametrize("name", ["results/format1-run.jsonl", "results/format3-ab.jsonl"])
def test_a_header_read_from_a_file_writes_and_reads_back_the_same(name):
    for header in read_results([FIXTURES / name]).headers.values():
        assert from_mapping(RunHeader, json.loads(json.dumps(to_mapping(header)))) == header
