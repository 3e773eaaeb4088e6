"""`fusebench run`, `report` and `check` on checkpoints written by mlx-lm's own classes, as a user
runs them: Qwen3, Llama and Phi-3 (an architecture the presets do not name), and a 4-bit Qwen3."""

from __future__ import annotations

import csv
import json

import mlx.core as mx
import pytest
from conftest import SMALL_MLX_LM, fusebench, fusebench_here, save_mlx_lm_checkpoint

from fusebench.models.loading import build_model, seed_weights

CHECKPOINTS = {"qwen3": ("qwen3", False), "llama": ("llama", False), "phi3": ("phi3", False)}
CHECKPOINTS["qwen3-4bit"] = ("qwen3", True)
EXPERIMENT = """\
name: mlx-lm-checkpoints
models:
{models}
variants:
  baseline: {{swiglu: unfused, attention: manual}}
  fused: {{swiglu: compiled, attention: sdpa}}
comparisons:
  - [baseline, fused]
workloads:
  prompt_tokens: 16
  gen_tokens: 3
trials: 2
shares: 0
"""


def _write(path, model_type, quantized):
    model = build_model({**SMALL_MLX_LM, "model_type": model_type})
    seed_weights(model, seed=2, dtype=mx.float32)
    save_mlx_lm_checkpoint(model, path, quantize=quantized)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlx-lm-runs")
    for name, (model_type, quantized) in CHECKPOINTS.items():
        _write(root / name, model_type, quantized)
    models = "\n".join(f"  - path: {name}" for name in CHECKPOINTS)
    (root / "exp.yaml").write_text(EXPERIMENT.format(models=models))
    done = fusebench("run", "exp.yaml", "--out", "r.jsonl", "--quiet", cwd=root)
    assert done.returncode == 0, done.stderr[-2000:]
    return root


def _records(path, kind):
    lines = (json.loads(line) for line in path.read_text().splitlines())
    return [r for r in lines if r["kind"] == kind]


def test_every_checkpoint_runs_and_passes_the_correctness_gate(run):
    correctness = _records(run / "r.jsonl", "correctness")
    assert {r["size"] for r in correctness} == set(CHECKPOINTS)
    assert all(r["passed"] for r in correctness)
    trials = _records(run / "r.jsonl", "trial")
    assert {(t["size"], t["ops"]["swiglu"]) for t in trials} >= {("phi3", "unfused")}


def test_the_switched_names_are_recorded_with_their_calls(run):
    sites = {(r["size"], r["site"]): r for r in _records(run / "r.jsonl", "site")}
    qwen = sites[("qwen3", "mlx_lm.models.qwen3.swiglu")]
    assert qwen["op"] == "swiglu" and qwen["decode_calls"] == 2  # one per layer
    assert ("phi3", "mlx_lm.models.phi3.scaled_dot_product_attention") in sites


def test_report_and_check_read_the_run(run):
    report = fusebench_here("report", "r.jsonl", "--out", "report", cwd=run)
    assert report.returncode == 0, report.stderr
    with open(run / "report" / "deltas.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["size"] for r in rows} == set(CHECKPOINTS)
    assert {r["metric"] for r in rows} == {"prefill", "gen"}
    check = fusebench_here("check", "r.jsonl", cwd=run)
    assert check.returncode == 0, check.stdout


def test_an_op_the_checkpoint_never_calls_is_one_line_and_exit_2(run):
    bad = (run / "exp.yaml").read_text().replace("swiglu: unfused", "geglu: unfused")
    bad = bad.replace("swiglu: compiled", "geglu: compiled")
    (run / "bad.yaml").write_text(bad)
    done = fusebench("run", "bad.yaml", "--out", "bad.jsonl", "--quiet", cwd=run)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "which qwen3 never calls" in lines[0], done.stderr
    assert "its switchable ops are attention, rms_norm, rope, swiglu" in lines[0]
