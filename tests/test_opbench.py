import argparse
import io
import math
from pathlib import Path

import pytest
from mlx_lm.models.gemma4_text import ModelArgs
from rich.console import Console

from fusebench.analysis.opstats import summarize_ops
from fusebench.commands import main
from fusebench.commands import ops as ops_command
from fusebench.core.flags import select_models
from fusebench.core.results import read_results
from fusebench.core.spec import load_experiment, parse_experiment
from fusebench.measure.machine import probe
from fusebench.measure.machine.env import THREAD_VARIABLES
from fusebench.measure.ops import opbench
from fusebench.measure.ops.opbench import (
    REEXEC_MARKER,
    check_ops,
    experiment_plan,
    op_cases,
    run_ops,
)
from fusebench.models import ops
from fusebench.models.config import Overrides, preset_config
from fusebench.models.ops import REGISTRY, UnknownOpError, geglu_unfused, register

L = 16


def cases_of(preset: str, op: str, prompt_tokens: int = L, batch: int = 1):
    config = preset_config(preset, Overrides())
    args = ModelArgs.from_dict(config)
    return {
        c.role: c
        for c in op_cases(args, config["size"], prompt_tokens=prompt_tokens, batch=batch, only=[op])
    }


# --- shapes --------------------------------------------------------------------------------------


def preset_plan(sizes: tuple[str, ...], prompt_tokens: int):
    """The op plan of an experiment of these presets at one prompt length."""
    models = "".join(f"  - {{preset: {size}}}\n" for size in sizes)
    return experiment_plan(
        parse_experiment(
            f"name: ops\nmodels:\n{models}variants: {{a: {{}}}}\n"
            f"workloads: {{prompt_tokens: {prompt_tokens}, gen_tokens: 2}}\n"
        )
    )


def test_tiny_geglu_widths():
    cases = cases_of("tiny", "geglu")
    assert set(cases) == {"mlp", "mlp double-wide", "ple gate"}  # no MoE block
    assert cases["mlp"].arrays == ((1, L, 128), (1, L, 128))
    assert cases["mlp double-wide"].shape == (1, L, 256)
    assert cases["ple gate"].shape == (1, L, 16)


def test_tiny_moe_geglu_widths():
    cases = cases_of("tiny-moe", "geglu", batch=2)
    assert set(cases) == {"mlp", "moe expert"}  # no double-wide MLP (no KV sharing), no PLE
    assert cases["mlp"].shape == (2, L, 96)
    # tokens x top_k rows of moe_intermediate_size
    assert cases["moe expert"].shape == (2 * L * 2, 1, 32)


def test_e2b_geglu_widths():
    cases = cases_of("e2b", "geglu")
    assert {role: c.shape[-1] for role, c in cases.items()} == {
        "mlp": 6144,
        "mlp double-wide": 12288,
        "ple gate": 256,
    }


@pytest.mark.parametrize(
    ("preset", "heads", "sliding", "full", "window"),
    [
        ("tiny", 4, (32, 2), (64, 2), 8),
        ("tiny-moe", 4, (32, 2), (64, 1), 8),  # K=V full layers use the global KV head count
        ("e2b", 8, (256, 1), (512, 1), 512),
        ("26b", 16, (256, 8), (512, 2), 1024),
    ],
)
def test_attention_head_dims_and_kv_heads(preset, heads, sliding, full, window):
    prompt = 12
    cases = cases_of(preset, "attention", prompt_tokens=prompt)
    for kind, (head_dim, kv_heads) in (("sliding", sliding), ("full", full)):
        prefill, decode = cases[f"prefill {kind}"], cases[f"decode {kind}"]
        assert prefill.arrays == (
            (1, heads, prompt, head_dim),
            (1, kv_heads, prompt, head_dim),
            (1, kv_heads, prompt, head_dim),
        )
        assert dict(prefill.keywords)["mask"] == "causal"
        kv_length = min(prompt, window) if kind == "sliding" else prompt
        assert decode.arrays[0] == (1, heads, 1, head_dim)
        assert decode.arrays[1] == (1, kv_heads, kv_length, head_dim)
        assert dict(decode.keywords)["mask"] is None


def test_softcap_rms_norm_and_rope_shapes():
    softcap = cases_of("e2b", "softcap", prompt_tokens=512)
    assert softcap["logits decode"].shape == (1, 1, 262144)
    assert softcap["logits full"].shape == (1, ops.FULL_LOGITS_MAX_TOKENS, 262144)
    assert softcap["logits decode"].positional == (30.0,)
    norm = cases_of("e2b", "rms_norm")["hidden"]
    assert norm.arrays == ((1, L, 1536), (1536,))
    rope = cases_of("e2b", "rope")
    assert rope["sliding"].shape == (1, 8, L, 256)
    full = rope["full (25% rotated)"]
    assert full.shape == (1, 8, L, 512)
    periods = dict(full.keywords)["periods"]
    # a quarter of 512 dims rotated
    assert len(periods) == 256 and sum(math.isfinite(p) for p in periods) == 64


def test_identical_shapes_of_several_sizes_are_timed_once():
    cases = preset_plan(("e2b", "e4b"), prompt_tokens=L).cases(["geglu", "softcap"])
    labels = [c.label for c in cases]
    assert f"E2B/E4B ple gate [1,{L},256]" in labels
    assert "E2B/E4B logits decode [1,1,262144]" in labels
    assert len(labels) == len(set(labels))


# --- input errors --------------------------------------------------------------------------------


def test_unknown_op_is_a_one_line_error_with_the_choices():
    with pytest.raises(UnknownOpError) as err:
        check_ops(["geglu", "reglu"])
    message = str(err.value)
    assert (
        "\n" not in message
        and "'reglu'" in message
        and "geglu, softcap, attention, rms_norm, rope, swiglu" in message
    )


def test_unknown_size_is_a_one_line_error_with_the_choices(monkeypatch, tmp_path, capsys):
    # the shipped default
    assert main(["ops", "--sizes", "e2b,e9b", "--out", str(tmp_path / "o.jsonl")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "e9b" in error and "E4B" in error
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "name: x\nmodels:\n  - {preset: e2b}\n  - {preset: e4b}\nvariants:\n  a: {}\n"
        "workloads: {prompt_tokens: 8, gen_tokens: 2}\n"
    )
    assert main(["ops", str(experiment), "--sizes", "31b", "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "--sizes: 31b not in" in capsys.readouterr().err and not (tmp_path / "o.jsonl").exists()


def test_rounds_must_be_positive():
    parser = argparse.ArgumentParser()
    ops_command.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--rounds", "0"])


def test_experiment_gives_sizes_and_workloads_and_notes_path_models(tmp_path):
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "name: small\nmodels:\n  - {preset: tiny, layers: 2}\n"
        "  - {preset: tiny-moe, dtype: bfloat16}\n"
        f"  - {{path: {checkpoint}}}\nvariants:\n  base: {{}}\n"
        "workloads:\n  prompt_tokens: [8, 32]\n  gen_tokens: 2\n  batch: 1\n"
    )
    plan = experiment_plan(load_experiment(experiment))
    assert [(t.preset, t.dtype) for t in plan.targets] == [
        ("tiny", "float32"),
        ("tiny-moe", "bfloat16"),
    ]
    assert plan.workloads == ((8, 1), (32, 1))
    assert len(plan.notes) == 1 and "skipped" in plan.notes[0]
    assert plan.experiment.file == str(experiment) and plan.experiment.name == "ops"
    # Per-layer shapes are the full preset's: layers: 2 leaves the tiny preset's MLP widths as they
    # are.
    roles = {
        c.role
        for c in experiment_plan(select_models(load_experiment(experiment), ["tiny"])).cases(
            ["geglu"]
        )
    }
    assert roles == {"mlp", "mlp double-wide", "ple gate"}
    assert any(c.label.endswith("bfloat16") for c in plan.cases(["geglu"]))


# --- a tiny run ----------------------------------------------------------------------------------


def quick_run(tmp_path, only, rounds=2):
    plan = preset_plan(("tiny",), prompt_tokens=L)
    out = tmp_path / "ops.jsonl"
    run_ops(
        plan,
        plan.cases(only),
        out,
        Console(file=io.StringIO()),
        rounds=rounds,
        quiet=True,
        min_sample_s=1e-3,
    )
    return read_results([out])


def test_tiny_run_writes_valid_op_records(tmp_path):
    results = quick_run(tmp_path, None)
    (header,) = results.of_kind("run")
    assert header["experiment"]["name"] == "ops" and header["env"]["backend"]
    records = results.of_kind("op")
    plan_cases = preset_plan(("tiny",), prompt_tokens=L).cases()
    expected = sum(len(REGISTRY[c.op].variants) for c in plan_cases) * 2
    assert len(records) == expected
    assert {r["op"] for r in records} == {"geglu", "softcap", "attention", "rms_norm", "rope"}
    for r in records:
        assert r["run_id"] == header["run_id"]
        assert r["seconds"] > 0 and r["bytes"] > 0 and r["gbps"] > 0 and r["iterations"] >= 1
        assert r["round"] in (0, 1)
        assert (r["flops"] is None) == (r["op"] in ("rms_norm", "rope"))
        assert r["max_abs_err"] < 1e-3  # every variant computes what its reference does
        assert r["shape_label"].startswith("tiny ")
    geglu = next(r for r in records if r["op"] == "geglu" and r["shape"] == [1, L, 128])
    assert geglu["bytes"] == 3 * L * 128 * 4  # gate and up read, the output written, fp32
    assert geglu["flops"] == ops.GEGLU_FLOPS_PER_ELEMENT * L * 128


def test_rounds_alternate_the_variant_order(tmp_path):
    records = quick_run(tmp_path, ["rms_norm"]).of_kind("op")
    assert [(r["round"], r["variant"]) for r in records] == [
        (0, "composed"),
        (0, "fast"),
        (1, "fast"),
        (1, "composed"),
    ]


@pytest.fixture
def extra_geglu_variant():
    register("geglu", "test_variant")(lambda gate, up: geglu_unfused(gate, up))
    yield "test_variant"
    REGISTRY["geglu"].variants.pop("test_variant")


def test_a_registered_variant_is_benchmarked_without_other_changes(tmp_path, extra_geglu_variant):
    records = quick_run(tmp_path, ["geglu"]).op_records()
    timed = {r.variant for r in records}
    assert timed == {"unfused", "compiled", extra_geglu_variant}
    summaries = summarize_ops(records)
    extra = [s for s in summaries if s.variant == extra_geglu_variant]
    assert extra and all(s.reference == "unfused" and s.speed is not None for s in extra)


def tiny_ops_args(folder: Path, prompt_tokens: int, *options: str) -> argparse.Namespace:
    """`fusebench ops` arguments for an experiment of the tiny preset at this prompt length, written
    to `folder`."""
    experiment = folder / "tiny.yaml"
    experiment.write_text(
        "name: tiny\nmodels: [{preset: tiny}]\nvariants: {a: {}}\n"
        f"workloads: {{prompt_tokens: {prompt_tokens}, gen_tokens: 2}}\n"
    )
    parser = argparse.ArgumentParser()
    ops_command.add_arguments(parser)
    return parser.parse_args([str(experiment), *options])


def test_command_prints_a_table_per_op(tmp_path, monkeypatch):
    monkeypatch.setenv(REEXEC_MARKER, "1")  # never re-exec the test process
    out = tmp_path / "ops.jsonl"
    args = tiny_ops_args(
        tmp_path, 512, "--only", "rms_norm,softcap", "--rounds", "2", "--out", str(out), "--quiet"
    )
    buffer = io.StringIO()
    assert ops_command.main(args, Console(file=buffer, width=200)) == 0
    text = buffer.getvalue()
    assert "rms_norm:" in text and "softcap:" in text and "Δ speed" in text
    assert "every decode step" in text  # the softcap shapes' notes
    assert len(read_results([out]).of_kind("op")) == 2 * 2 + 2 * 2 * 2


def test_ops_restarts_with_the_threads_a_run_would_give_its_workers(monkeypatch):
    monkeypatch.delenv(REEXEC_MARKER, raising=False)
    for name in THREAD_VARIABLES:
        monkeypatch.setenv(name, "99")
    started = {}

    def execve(path, argv, env):  # what os.execve would start, instead of starting it
        started.update(env)
        raise SystemExit(0)

    monkeypatch.setattr(opbench.os, "execve", execve)
    with pytest.raises(SystemExit):
        opbench.ensure_worker_env(Console(file=io.StringIO()), 1)
    assert {started[name] for name in THREAD_VARIABLES} == {"1"}
    assert started[REEXEC_MARKER] == "1"


@pytest.mark.parametrize(("flag", "threads"), [([], None), (["--threads", "1"], 1)])
def test_ops_command_asks_for_the_run_thread_setting_and_records_it(
    tmp_path, monkeypatch, flag, threads
):
    asked = []
    monkeypatch.setattr(opbench, "ensure_worker_env", lambda console, n: asked.append(n))
    measured = 2  # what `threads: auto` measured here: a timing outcome, so the test gives it
    monkeypatch.setattr(probe, "auto_threads", lambda blas="auto": measured)
    for name in THREAD_VARIABLES:  # as ensure_worker_env would have set them before the re-exec
        monkeypatch.setenv(name, str(threads or measured))
    out = tmp_path / "ops.jsonl"
    args = tiny_ops_args(
        tmp_path, 16, "--only", "rms_norm", "--rounds", "1", "--out", str(out), "--quiet", *flag
    )
    assert ops_command.main(args, Console(file=io.StringIO(), width=200)) == 0
    assert asked == [threads or measured]
    assert read_results([out]).of_kind("run")[0]["env"]["threads"] == (threads or measured)
