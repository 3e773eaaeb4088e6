"""The pipe between the runner and its workers: typed values on both sides, JSON only on the pipe,
in the shape protocol 2 has always had, so a reference build of an earlier commit (`run --against`)
still understands this one and is understood by it."""

from __future__ import annotations

import json

import pytest

from fusebench.core.cell import Agreement, DepthSpeed, KernelFact, Measured, Trial
from fusebench.core.experiment import model_spec
from fusebench.core.typed import to_mapping, to_record
from fusebench.measure.job import (
    PROTOCOL,
    Done,
    Gate,
    Loaded,
    Recorded,
    WorkerJob,
    decode_event,
    encode_event,
)

MEASURED = Measured(
    prefill_s=0.1,
    prefill_tps=120.0,
    gen_s=0.2,
    gen_tps=10.0,
    step_s=(0.1, 0.1),
    peak_memory_bytes=2**20,
    ttft_s=0.11,
    ttft_tps=109.0,
)
RESULTS = [
    Trial(
        variant="base",
        ops={"geglu": "unfused"},
        round=3,
        warmup=False,
        measured=MEASURED,
        compile_s=None,
    ),
    Agreement(
        variant="fused",
        reference="base",
        max_abs_err=1e-3,
        max_rel_err=1e-5,
        tokens_checked=8,
        tokens_agree=8,
        atol=1e-2,
        passed=True,
    ),
    DepthSpeed(variant="base", round=0, depth=512, gen_tokens=2, gen_s=0.1, gen_tps=20.0),
    KernelFact(
        "attention", "sdpa", "force_fused", "q 1x8x12x64", "fallback", "mask", "prefill", 64
    ),
]


def test_a_job_carries_the_model_as_protocols_2_and_3_have():
    model = model_spec(preset="tiny", size="my label", layers=2, dtype="bfloat16", quantize="nvfp4")
    job = WorkerJob(
        model, {"base": {"geglu": "unfused"}}, 512, 3, Gate("base", 0.01, 8), ("/p.py",)
    )
    sent = json.loads(job.to_json())
    # No label on the pipe: a worker of an earlier commit builds its model from exactly these
    # fields.
    assert sent["model"] == {
        "preset": "tiny",
        "path": None,
        "layers": 2,
        "dtype": "bfloat16",
        "quantize": "nvfp4",
    }
    assert sent["protocol"] == PROTOCOL == 3  # 3: the warm-up carries the correctness check
    received = WorkerJob.from_json(job.to_json())
    # the label the worker never shows
    assert received.model.key == model.key and received.model.size == "tiny"
    assert (received.variants, received.correctness, received.plugins) == (
        job.variants,
        job.correctness,
        ("/p.py",),
    )


@pytest.mark.parametrize("result", RESULTS, ids=lambda r: type(r).__name__)
def test_every_result_crosses_the_pipe_unchanged(result):
    line = encode_event(Recorded(result))
    assert decode_event(line) == Recorded(result)
    record = json.loads(line)["record"]
    assert record == to_record(result) and next(iter(record)) == "kind"


def test_a_trial_record_holds_its_measurements_among_its_own_fields():
    assert list(to_mapping(RESULTS[0])) == [
        "variant",
        "ops",
        "round",
        "warmup",
        "prefill_s",
        "prefill_tps",
        "gen_s",
        "gen_tps",
        "step_s",
        "peak_memory_bytes",
        "prefill_peak_bytes",
        "gen_peak_bytes",
        "ttft_s",
        "ttft_tps",
        "prefill_cpu_s",
        "gen_cpu_s",
        "started_unix_s",
        "ended_unix_s",
        "steal_s",
        "others_cpu_s",
        "compile_s",
    ]


def test_a_trial_from_a_build_that_predates_ttft_is_read():
    record = {
        "kind": "trial",
        **{k: v for k, v in to_mapping(RESULTS[0]).items() if not k.startswith("ttft")},
    }
    trial = decode_event(json.dumps({"event": "record", "record": record}))
    assert isinstance(trial, Recorded) and trial.result.measured.ttft_s is None
    assert trial.result.measured.prefill_tps == MEASURED.prefill_tps


def test_loaded_and_done_cross_the_pipe():
    for event in (Loaded(1.5, 1000, 4000), Loaded(2.0, 10, 40, not_kept="1.0 GiB free"), Done()):
        assert decode_event(encode_event(event)) == event


@pytest.mark.parametrize(
    "line",
    [
        '{"partial": ',
        '["a list"]',
        '{"event": "hello"}',
        '{"event": "loaded", "load_s": 1.0}',
        '{"event": "record", "record": {"kind": "trial", "variant": "a"}}',
        '{"event": "record", "record": {"kind": "opinion"}}',
    ],
)
def test_a_line_that_is_no_event_is_a_value_error(line):
    with pytest.raises(ValueError):
        decode_event(line)
