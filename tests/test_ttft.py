"""mlx-lm's time to first token beside fusebench's prefill: recorded by every trial on the tiny
preset, reported where trials carry it, and never required of records from before it existed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import results_file

from fusebench.analysis.study import build_study
from fusebench.core.results import read_results
from fusebench.measure.worker import make_prompt, time_trial
from fusebench.models.loading import load_model
from fusebench.present.report import write_report
from fusebench.present.sections.latency import MLX_LM_TTFT_COLUMN
from fusebench.present.sections.throughput import TTFT_METRIC

PROMPT, GEN = 12, 3
OPS = {"geglu": "unfused", "softcap": "unfused", "attention": "manual"}
EXPERIMENT = """\
name: t
models:
  - {preset: tiny}
variants:
  baseline: {geglu: unfused, softcap: unfused, attention: manual}
  fused: {geglu: compiled, softcap: compiled, attention: sdpa}
workloads: {prompt_tokens: 12, gen_tokens: 3}
trials: 3
shares: 0
"""


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


def test_a_trial_records_ttft_at_or_after_the_prefill(tiny):
    prompt = make_prompt(tiny.args.vocab_size, 1, PROMPT, 0, 0)
    record = time_trial(tiny, prompt, GEN, 2048).measured
    # By construction: the TTFT clock is read after the prefill's, once the first decode step is
    # queued.
    assert record.ttft_s >= record.prefill_s > 0
    assert record.ttft_tps == pytest.approx(PROMPT / record.ttft_s)
    # prefill and gen are measured as before: gen is still every decode step after the first token.
    assert len(record.step_s) == GEN - 1 and sum(record.step_s) == pytest.approx(
        record.gen_s, rel=1e-6
    )


def test_no_decode_step_means_no_ttft(tiny):
    prompt = make_prompt(tiny.args.vocab_size, 1, PROMPT, 0, 0)
    record = time_trial(tiny, prompt, 1, 2048).measured
    assert record.prefill_s > 0 and record.ttft_s is None and record.ttft_tps is None


def trial(variant: str, round_: int, ttft_s: float | None) -> dict[str, Any]:
    """A timed trial of the tiny cell: prefill 0.1 s, two decode steps of 0.05 s; `ttft_s` None: an
    old record."""
    record = {
        "kind": "trial",
        "run_id": "run1",
        "cell": "tiny|pp12 tg3 b1",
        "model": "tiny",
        "model_key": "tiny",
        "size": "tiny",
        "layers": 2,
        "dtype": "float32",
        "quantize": None,
        "prompt_tokens": PROMPT,
        "gen_tokens": GEN,
        "batch": 1,
        "workload": "pp12 tg3 b1",
        "variant": variant,
        "ops": OPS,
        "round": round_,
        "warmup": False,
        "prefill_s": 0.1,
        "prefill_tps": PROMPT / 0.1,
        "gen_s": 0.1,
        "gen_tps": 20.0,
        "step_s": [0.05, 0.05],
        "peak_memory_bytes": 1_000_000,
        "compile_s": None,
    }
    if ttft_s is not None:
        record |= {"ttft_s": ttft_s, "ttft_tps": PROMPT / ttft_s}
    return record


def report(tmp_path: Path, trials: list[dict[str, Any]]) -> tuple[str, pd.DataFrame]:
    path = tmp_path / "results.jsonl"
    path = results_file(path, trials, experiment=EXPERIMENT)
    out = tmp_path / "report"
    write_report(build_study(read_results([path])), [], out)
    markdown = "\n".join(
        re.sub(r" {2,}", " ", line) for line in (out / "report.md").read_text().splitlines()
    )
    return markdown, pd.read_csv(out / "summary.csv")


def test_old_trials_without_ttft_still_report(tmp_path: Path):
    markdown, summary = report(tmp_path, [trial("baseline", r, None) for r in range(3)])
    assert "## Latency" in markdown and "| tiny | baseline | 100.00 ms |" in markdown
    assert f"| {MLX_LM_TTFT_COLUMN} |" not in markdown and f"| {TTFT_METRIC} |" not in markdown
    assert "ttft_s_median" not in summary.columns


def test_ttft_is_shown_where_trials_carry_it(tmp_path: Path):
    trials = [trial("baseline", r, 0.15) for r in range(3)]
    markdown, summary = report(tmp_path, trials)
    assert f"| tiny | {TTFT_METRIC} | 80.0 |" in markdown  # 12 tokens / 0.15 s
    assert "| tiny | baseline | 100.00 ms | 150.00 ms | 50.00 ms |" in markdown
    assert set(summary["ttft_s_median"]) == {0.15}


def test_a_variant_without_ttft_gets_a_dash_beside_one_with_it(tmp_path: Path):
    trials = [t for r in range(3) for t in (trial("baseline", r, None), trial("fused", r, 0.15))]
    markdown, _ = report(tmp_path, trials)
    assert f"| tiny | {TTFT_METRIC} | — | 80.0 |" in markdown
    assert "| tiny | baseline | 100.00 ms | — | 50.00 ms |" in markdown
