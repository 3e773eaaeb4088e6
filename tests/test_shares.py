"""Each op's share of a step and the expected Δ: the calls traced from the model (only those it
computes), the share records a run writes, the Amdahl arithmetic, and the report's table, column and
deltas.csv."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import mlx.core as mx
import pytest
from conftest import cell, fusebench_here, results_file, trials

from fusebench.analysis.amdahl import IN_MODEL_ERROR
from fusebench.analysis.shares import ShareData, disagrees
from fusebench.measure.ops.shares import ShareTimer, trace_steps
from fusebench.measure.worker import make_prompt, prefill
from fusebench.models.loading import load_model

PROMPT = 16


@pytest.fixture(scope="module")
def traced() -> dict:
    model = load_model("tiny", seed=0)
    prompt = make_prompt(model.args.vocab_size, 1, PROMPT, 0, 0)
    return trace_steps(model, prompt, lambda m, p, cache: prefill(m, p, cache, 2048)), model.args


def _shapes(calls: list, op: str) -> dict[str, int]:
    return {c.label: c.calls for c in calls if c.op == op}


def test_prefill_counts_only_the_calls_it_computes(traced: tuple) -> None:
    calls, args = traced
    vocab, chunk = args.vocab_size, PROMPT - 1
    # mlx-lm-style prefill evaluates only the KV cache for the prompt's first 15 tokens: their
    # logits (and so their softcap) are never computed, only the last token's.
    assert _shapes(calls["prefill"], "softcap") == {f"[1,1,{vocab}]": 1}
    # The KV-shared layers feed no cache, so for those 15 tokens they never run: no double-wide MLP
    # at that length.
    wide = 2 * args.intermediate_size
    geglu = _shapes(calls["prefill"], "geglu")
    assert f"[1,{chunk},{wide}] [1,{chunk},{wide}]" not in geglu
    shared = args.num_kv_shared_layers
    assert geglu[f"[1,1,{wide}] [1,1,{wide}]"] == shared
    # Nor does the last own-KV layer's MLP: the cache holds K/V made from that layer's input, and
    # its output feeds only the KV-shared layers. Of the own layers' MLPs over the 15 tokens, all
    # but the last one run.
    assert geglu[f"[1,{chunk},{args.intermediate_size}] [1,{chunk},{args.intermediate_size}]"] == (
        args.num_hidden_layers - shared - 1
    )


def test_decode_step_calls_every_layer_once(traced: tuple) -> None:
    calls, args = traced
    assert _shapes(calls["decode"], "softcap") == {f"[1,1,{args.vocab_size}]": 1}
    attention = sum(c.calls for c in calls["decode"] if c.op == "attention")
    assert attention == args.num_hidden_layers


def test_timer_times_every_implementation_of_every_call(traced: tuple) -> None:
    calls, _ = traced
    implementations = {
        "geglu": ["unfused", "compiled"],
        "softcap": ["unfused"],
        "attention": ["manual", "sdpa"],
        "rms_norm": ["fast"],
        "rope": ["fast"],
    }
    samples = list(ShareTimer(calls, implementations, min_sample_s=1e-4).time_round(0))
    expected = sum(len(implementations[c.op]) for phase in calls.values() for c in phase)
    assert len(samples) == expected
    assert {(s.phase, s.op, s.variant) for s in samples} >= {
        ("decode", "geglu", "compiled"),
        ("prefill", "attention", "sdpa"),
    }
    assert all(s.seconds > 0 and s.overhead_s > 0 and s.calls >= 1 for s in samples)
    mx.clear_cache()


# --- the arithmetic, on records with known times --------------------------------------------------

CELL = cell(gen=4)
OPS = {
    "baseline": {"softcap": "unfused", "geglu": "unfused"},
    "slow": {"softcap": "tenfold", "geglu": "unfused"},
}


def _share(phase: str, op: str, impl: str, seconds: float, rnd: int, calls: int = 1) -> dict:
    return {
        "kind": "share",
        **CELL,
        "phase": phase,
        "op": op,
        "variant": impl,
        "call": "[1,1,8]",
        "calls": calls,
        "round": rnd,
        "seconds": seconds,
        "overhead_s": 0.0001,
        "build": "current",
    }


def _records(slow_softcap_s: float, measured_gen_tps: float = 1 / 0.110) -> list[dict]:
    """Baseline: a 100 ms decode step (10 gen tok/s) and a 1 s prefill; softcap 1 ms unfused,
    `slow_softcap_s` tenfold, per round with a little noise; geglu the same in both."""
    records = []
    for rnd, noise in enumerate((-2e-5, 0.0, 2e-5, 1e-5)):
        for phase in ("prefill", "decode"):
            records += [
                _share(phase, "softcap", "unfused", 0.0011 + noise, rnd),
                _share(phase, "softcap", "tenfold", slow_softcap_s + 0.0001 + noise, rnd),
                _share(phase, "geglu", "unfused", 0.0021, rnd, calls=2),
            ]
    prefill_tps = {"baseline": 128 / 1.0, "slow": 128 / (1.0 + slow_softcap_s - 0.001)}
    gen_tps = {"baseline": 10.0, "slow": measured_gen_tps}
    runs = {
        v: [(prefill_tps[v], gen_tps[v] * (1 + d)) for d in (-0.001, 0.0, 0.001, 0.0005)]
        for v in OPS
    }
    records += [{**t, "ops": OPS[t["variant"]]} for t in trials(CELL, runs)]
    return records


def test_shares_and_expected_delta_follow_amdahl() -> None:
    records = _records(slow_softcap_s=0.011)
    data = ShareData(
        [r for r in records if r["kind"] == "share"], [r for r in records if r["kind"] == "trial"]
    )
    key = CELL["cell"]
    gen = data.step_shares(key, "baseline", "gen")
    assert gen is not None
    assert gen.step_s == pytest.approx(0.1, rel=1e-3)
    by_op = {o.op: o for o in gen.ops}
    # the eval overhead subtracted
    assert by_op["softcap"].seconds == pytest.approx(0.001, rel=0.05)
    assert (
        by_op["geglu"].seconds == pytest.approx(2 * 0.002, rel=0.01) and by_op["geglu"].calls == 2
    )
    assert gen.rest_s == pytest.approx(0.1 - 0.005, rel=0.01)
    expected = data.expected_delta(key, "baseline", "slow", "gen")
    assert expected is not None and expected.ops == ("softcap",)
    assert expected.delta_pct == pytest.approx(100 * (0.1 / 0.110 - 1), abs=0.05)
    assert expected.low_pct < expected.delta_pct < expected.high_pct
    # The interval's ends: the 10 ms the slow softcap adds, 35% more and less inside the model, plus
    # the noise.
    assert expected.low_pct == pytest.approx(
        100 * (0.1 / (0.1 + 0.01 * (1 + IN_MODEL_ERROR)) - 1), abs=0.3
    )
    assert expected.high_pct == pytest.approx(
        100 * (0.1 / (0.1 + 0.01 * (1 - IN_MODEL_ERROR)) - 1), abs=0.3
    )
    assert not disagrees(expected, expected.delta_pct - 1, expected.delta_pct + 1)
    assert disagrees(expected, expected.high_pct + 0.5, expected.high_pct + 2)
    assert math.isclose(data.expected_delta(key, "baseline", "baseline", "gen").delta_pct, 0.0)


EXPERIMENT = """name: slow-softcap
models:
  - {preset: e2b, layers: 2}
variants:
  baseline: {softcap: unfused}
  slow: {softcap: unfused}
comparisons:
  - [baseline, slow]
workloads: {prompt_tokens: 128, gen_tokens: 4}
"""


def test_report_shows_shares_expected_delta_and_deltas_csv(tmp_path: Path) -> None:
    # The measured gen Δ (-25%) is far beyond what the softcap accounts for (-9%): the report says
    # so.
    path = results_file(
        tmp_path / "r.jsonl", _records(0.011, measured_gen_tps=7.5), experiment=EXPERIMENT
    )
    done = fusebench_here("report", str(path), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Where the time goes" in report and "Expected Δ (ops)" in report
    assert "lies outside what the ops that differ (softcap) account for" in report
    with open(tmp_path / "out" / "deltas.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {
        "size",
        "metric",
        "baseline",
        "new",
        "delta_pct",
        "low_pct",
        "high_pct",
        "verdict",
        "expected_delta_pct",
        "expected_low_pct",
        "expected_high_pct",
    } <= set(rows[0])
    gen = next(r for r in rows if r["metric"] == "gen")
    assert float(gen["expected_delta_pct"]) == pytest.approx(-9.09, abs=0.1)
    assert float(gen["delta_pct"]) == pytest.approx(-25.0, abs=0.2)
    assert gen["verdict"] == "slower"
