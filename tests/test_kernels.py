"""Kernel truth: which kernels really run, read from MLX (force_fused, and the lazy graph after
mx.compile)."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from mlx_lm.models.gemma4_text import ModelArgs

from fusebench.core.typed import to_record
from fusebench.measure.ops.kernels import (
    current_backend,
    graph_nodes,
    kernel_facts,
    kernel_names,
    probe_compiled,
    probe_fused,
)
from fusebench.measure.ops.opbench import op_cases
from fusebench.models.config import Overrides, preset_config
from fusebench.models.ops import calls_by_op
from fusebench.present.kernels import compile_note, summarize_probes

on_cpu = pytest.mark.skipif(
    current_backend().name != "cpu", reason="these facts are the CPU backend's"
)

PROMPT = 16  # short: the probes build the real shapes, and the CPU only raises or builds graphs


@pytest.fixture(scope="module", params=["e2b", "31b"])
def preset(request):
    return request.param, preset_config(request.param, Overrides(layers=2))


def probed(config, prompt_tokens=PROMPT):
    """The kernel facts of a config, as the worker records them."""
    return kernel_facts(ModelArgs.from_dict(config), prompt_tokens=prompt_tokens)


@pytest.fixture(scope="module")
def facts(preset):
    return probed(preset[1])


def test_attention_is_probed_at_the_calls_ops_times_at_the_prompt(preset):
    size, config = preset
    args = ModelArgs.from_dict(config)
    probes = calls_by_op()["attention"].kernel_cases(args, 600)
    # the same calls, the same shapes
    assert probes == op_cases(args, size, prompt_tokens=600, only=["attention"])
    by_role = {case.role: case for case in probes}
    assert [case.phase for case in probes] == ["prefill", "decode"] * 2
    heads, kv_heads, window = (
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["sliding_window"],
    )
    assert (
        by_role["prefill sliding"].label
        == f"prefill sliding q[1,{heads},600,256] kv[1,{kv_heads},600,256]"
    )
    assert by_role["decode full"].shape == (1, heads, 1, 512)
    # Longer than the sliding window, a prefill gets mlx-lm's band mask.
    mask = calls_by_op()["attention"].inputs(by_role["prefill sliding"], seed=0).kwargs["mask"]
    assert isinstance(mask, mx.array) == (window < 600)
    assert (
        calls_by_op()["attention"].inputs(by_role["prefill full"], seed=0).kwargs["mask"]
        == "causal"
    )


def test_the_elementwise_ops_are_probed_at_one_token(facts):
    labels = {
        (f.op, f.shape_label) for f in facts if f.probe == "graph" and f.variant == "compiled"
    }
    assert ("softcap", "logits decode [1,1,262144]") in labels
    # the same call at one token: probed once
    assert not any(label.startswith("logits full") for _, label in labels)
    assert all(
        label.split()[-1].startswith("[1,1,")
        for op, label in labels
        if op == "geglu" and "moe" not in label
    )


@on_cpu
def test_every_attention_shape_falls_back_on_cpu(preset, facts):
    probes = [f for f in facts if f.probe == "force_fused"]
    seen = {(f.head_dim, f.phase) for f in probes}
    assert seen == {(256, "prefill"), (256, "decode"), (512, "prefill"), (512, "decode")}
    for fact in probes:
        assert (fact.op, fact.variant, fact.KIND) == ("attention", "sdpa", "kernel")
        assert fact.status == "fallback", fact
        assert "no fused kernel is available" in fact.reason and "CPU" in fact.reason
        assert fact.backend == "cpu" and fact.mlx_version == mx.__version__
    sentence = summarize_probes(facts)
    assert sentence.startswith("on cpu `sdpa` fell back to composed ops for every attention shape")
    assert (
        "head_dim 256 and 512, prefill and decode" in sentence
        and "MLX says: no fused kernel" in sentence
    )


@on_cpu
def test_window_mask_prefill_falls_back_too():
    args = ModelArgs.from_dict(preset_config("e2b", Overrides(layers=2)))
    case = next(
        c for c in calls_by_op()["attention"].kernel_cases(args, 520) if c.role == "prefill sliding"
    )
    assert probe_fused(case).status == "fallback"


def _graph(facts, op, variant):
    return next(f for f in facts if f.probe == "graph" and f.op == op and f.variant == variant)


def test_compiled_variants_fuse(facts):
    softcap = _graph(facts, "softcap", "compiled")
    assert softcap.status == "single kernel" and softcap.kernels == 1
    assert softcap.fused[0].startswith("Compiled")
    unfused, compiled = _graph(facts, "geglu", "unfused"), _graph(facts, "geglu", "compiled")
    assert unfused.kernels > 1
    # Every kernel of the compiled variant is a Compiled one, and there are fewer of them. (MLX 0.32
    # splits the shapeless-compiled gelu chain in two: mx.compile fuses at most 11 nodes deep and,
    # shapeless, each scalar constant adds two Broadcast nodes to the chain.)
    assert compiled.kernels == len(compiled.fused) >= 1
    assert all(k.startswith("Compiled") for k in compiled.fused)
    assert compiled.kernels < unfused.kernels
    assert _graph(facts, "softcap", "unfused").status == "composed"


@on_cpu
def test_fast_ops_fall_back_to_composed_on_cpu(facts):
    # mx.fast.rms_norm and mx.fast.rope have no CPU kernel either: the graph holds their composed
    # ops.
    for op in ("rms_norm", "rope"):
        fact = _graph(facts, op, "fast")
        assert fact.status == "composed" and not fact.fused
        assert "RMSNorm" not in fact.primitives and "RoPE" not in fact.primitives


def test_facts_cover_every_variant_of_every_op_the_model_calls_and_serialize(preset, facts):
    from fusebench.models.loading import build_model
    from fusebench.models.ops import REGISTRY
    from fusebench.models.switched import called_ops

    called = called_ops(build_model(preset[1]), mx.array([[0]]))
    graphed = {(f.op, f.variant) for f in facts if f.probe == "graph"}
    assert graphed == {(op, v) for op in called for v in REGISTRY[op].variants}
    assert all(f.status != "error" for f in facts)
    json.dumps([to_record(f) for f in facts])  # each one a record as it is written


def test_graph_nodes_count_a_single_compiled_kernel():
    x = mx.ones((2, 3))
    mx.eval(x)
    compiled = mx.compile(lambda a: mx.tanh(a * 2.0) + 1.0)
    assert [k[: len("Compiled")] for k in kernel_names(graph_nodes(compiled(x)))] == ["Compiled"]
    assert kernel_names(graph_nodes(mx.tanh(x * 2.0) + 1.0)) == ["Multiply", "Tanh", "Add"]
    # mx.repeat (broadcast, then a merging reshape) must copy; a transpose alone is a view.
    assert kernel_names(graph_nodes(mx.repeat(x, 2, axis=0))) == ["Reshape(copy)"]
    assert kernel_names(graph_nodes(x.T)) == []


def test_probe_compiled_reads_a_registered_variant():
    x = mx.ones((1, 4))
    fact = probe_compiled("softcap", "unfused", (x, 30.0), shape_label="tiny")
    assert fact.status == "composed" and fact.kernels == 3 and fact.shape_label == "tiny"
    assert to_record(fact)["kind"] == "kernel"


@on_cpu
def test_the_table_says_why_compiled_geglu_is_two_kernels():
    facts = probed(preset_config("e2b", Overrides(layers=2)))
    note = compile_note([f for f in facts if f.probe == "graph"])
    assert (
        note
        and note.startswith("geglu compiled: several fused kernels")
        and "max_compile_depth" in note
    )
