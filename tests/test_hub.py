"""Models by Hugging Face repo id, found in a real cache layout the test builds from a checkpoint
written by mlx-lm's classes (`models--org--name/snapshots/<hash>/`, `refs/main`), offline: `run`,
`verify` and `kernels` take the repo id, the header names the repo and the snapshot's commit, and a
repo that is not in the cache is one line and exit 2. No test here touches the network."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mlx.core as mx
import pytest
from conftest import SMALL_MLX_LM, fusebench, save_mlx_lm_checkpoint

from fusebench.core.spec import parse_experiment
from fusebench.measure.hub import is_repo_id
from fusebench.models.loading import build_model, seed_weights

REPO = "test-org/tiny-qwen3"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("hub")
    cache = root / "hub"
    repo = cache / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    model = build_model({**SMALL_MLX_LM, "model_type": "qwen3"})
    seed_weights(model, seed=3, dtype=mx.float32)
    save_mlx_lm_checkpoint(model, snapshot)
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return root, env


def test_a_repo_id_runs_offline_and_the_header_names_its_commit(hub):
    root, env = hub
    argv = ["run", "--model", REPO, "--op", "swiglu=unfused,compiled", "-p", "12", "--trials", "2"]
    done = fusebench(*argv, "--schedule", "sequential", "--out", "r.jsonl", cwd=root, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (root / "r.jsonl").read_text().splitlines()]
    header = records[0]
    assert header["repos"] == {REPO: COMMIT}
    trials = [r for r in records if r["kind"] == "trial"]
    assert trials and {t["size"] for t in trials} == {"tiny-qwen3"}
    assert {t["model_key"].split(":")[0] for t in trials} == {REPO}
    report = fusebench("report", "r.jsonl", "--out", "rep", cwd=root, env=env)
    assert report.returncode == 0, report.stderr[-2000:]
    assert f"Weights: {REPO} at commit {COMMIT[:12]}" in (root / "rep" / "report.md").read_text()


def test_verify_and_kernels_take_a_repo_id(hub):
    root, env = hub
    verify = fusebench("verify", "--model", REPO, cwd=root, env=env)
    assert verify.returncode == 0, verify.stderr[-2000:]
    assert COMMIT in verify.stdout
    kernels = fusebench("kernels", "--sizes", REPO, cwd=root, env=env)
    assert kernels.returncode == 0, kernels.stderr[-2000:]
    assert "swiglu" in kernels.stdout


def test_a_repo_not_in_the_cache_offline_is_one_line_and_exit_2(hub):
    root, env = hub
    done = fusebench(
        "run", "--model", "test-org/absent", "--op", "swiglu=unfused,compiled", cwd=root, env=env
    )
    assert done.returncode == 2
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "test-org/absent" in err and "hf download test-org/absent" in err
    assert "HF_HUB_OFFLINE" in err


def test_a_repo_entry_in_an_experiment_file():
    exp = parse_experiment(
        "name: r\nmodels:\n  - {repo: org/name@v1}\nvariants: {a: {geglu: unfused}}\n"
        "workloads: {prompt_tokens: 8, gen_tokens: 2}\n"
    )
    (model,) = exp.models
    assert model.repo == "org/name@v1" and model.size == "name" and model.path is None
    assert model.key.startswith("org/name@v1:")
    assert is_repo_id("org/name@v1") and not is_repo_id("just-a-name")
