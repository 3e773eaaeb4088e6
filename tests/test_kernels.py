"""Kernel truth: which kernels really run, read from MLX (force_fused, and the lazy graph after mx.compile)."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest

from bench.measure.kernels import (
    attention_shapes,
    current_backend,
    graph_nodes,
    kernel_facts,
    kernel_names,
    probe_compiled,
    probe_sdpa,
)
from bench.present.kernels import compile_note, summarize_attention
from models.config import Overrides, preset_config

on_cpu = pytest.mark.skipif(current_backend().name != "cpu", reason="these facts are the CPU backend's")

PROMPT = 16  # short: the probes build the real shapes, and the CPU only raises or builds graphs


@pytest.fixture(scope="module", params=["e2b", "31b"])
def preset(request):
    return request.param, preset_config(request.param, Overrides(layers=2))


@pytest.fixture(scope="module")
def facts(preset):
    return kernel_facts(preset[1], prompt_tokens=PROMPT, dtype="float32")


def test_attention_shapes_follow_the_model_geometry(preset):
    config = preset[1]
    shapes = {(s.kind, s.phase): s for s in attention_shapes(config, prompt_tokens=600)}
    assert set(shapes) == {(k, p) for k in ("sliding", "full") for p in ("prefill", "decode")}
    heads = config["num_attention_heads"]
    full_kv = config["num_global_key_value_heads"] if config["attention_k_eq_v"] else config["num_key_value_heads"]
    window = config["sliding_window"]
    assert shapes["sliding", "prefill"].head_dim == 256 and shapes["full", "prefill"].head_dim == 512
    assert all(s.n_heads == heads for s in shapes.values())
    assert shapes["sliding", "decode"].n_kv_heads == config["num_key_value_heads"]
    assert shapes["full", "decode"].n_kv_heads == full_kv
    # Prefill: the whole prompt; longer than the sliding window it gets mlx-lm's band mask.
    assert shapes["full", "prefill"].mask == "causal"
    assert shapes["sliding", "prefill"].mask == ("window" if window < 600 else "causal")
    # Decode: one query; the rotating cache holds at most the window.
    assert shapes["full", "decode"].key_len == 601 and shapes["full", "decode"].mask is None
    assert shapes["sliding", "decode"].key_len == min(601, window)
    label = attention_shapes(config, prompt_tokens=128)[0].label
    assert label == f"sliding hd256 prefill L128 q{heads} kv{config['num_key_value_heads']}"


@on_cpu
def test_every_attention_shape_falls_back_on_cpu(preset, facts):
    probes = [f for f in facts if f["probe"] == "force_fused"]
    seen = {(f["head_dim"], f["phase"]) for f in probes}
    assert seen == {(256, "prefill"), (256, "decode"), (512, "prefill"), (512, "decode")}
    for fact in probes:
        assert (fact["op"], fact["variant"], fact["kind"]) == ("attention", "sdpa", "kernel")
        assert fact["status"] == "fallback", fact
        assert "no fused kernel is available" in fact["reason"] and "CPU" in fact["reason"]
        assert fact["backend"] == "cpu" and fact["mlx_version"] == mx.__version__
    sentence = summarize_attention(facts)
    assert sentence.startswith("on cpu `sdpa` fell back to composed ops for every attention shape")
    assert "head_dim 256 and 512, prefill and decode" in sentence and "MLX says: no fused kernel" in sentence


@on_cpu
def test_window_mask_prefill_falls_back_too():
    config = preset_config("e2b", Overrides(layers=2))
    shape = next(s for s in attention_shapes(config, prompt_tokens=520) if s.mask == "window")
    assert probe_sdpa(shape).status == "fallback"


def _graph(facts, op, variant):
    return next(f for f in facts if f["probe"] == "graph" and f["op"] == op and f["variant"] == variant)


def test_compiled_variants_fuse(facts):
    softcap = _graph(facts, "softcap", "compiled")
    assert softcap["status"] == "single kernel" and softcap["kernels"] == 1
    assert softcap["fused"][0].startswith("Compiled")
    unfused, compiled = _graph(facts, "geglu", "unfused"), _graph(facts, "geglu", "compiled")
    assert unfused["kernels"] > 1
    # Every kernel of the compiled variant is a Compiled one, and there are fewer of them. (MLX 0.32 splits the
    # shapeless-compiled gelu chain in two: mx.compile fuses at most 11 nodes deep and, shapeless, each scalar
    # constant adds two Broadcast nodes to the chain.)
    assert compiled["kernels"] == len(compiled["fused"]) >= 1
    assert all(k.startswith("Compiled") for k in compiled["fused"])
    assert compiled["kernels"] < unfused["kernels"]
    assert _graph(facts, "softcap", "unfused")["status"] == "composed"


@on_cpu
def test_fast_ops_fall_back_to_composed_on_cpu(facts):
    # mx.fast.rms_norm and mx.fast.rope have no CPU kernel either: the graph holds their composed ops.
    for op in ("rms_norm", "rope"):
        fact = _graph(facts, op, "fast")
        assert fact["status"] == "composed" and not fact["fused"]
        assert "RMSNorm" not in fact["primitives"] and "RoPE" not in fact["primitives"]


def test_facts_cover_every_registered_variant_and_serialize(facts):
    from models.ops import REGISTRY

    graphed = {(f["op"], f["variant"]) for f in facts if f["probe"] == "graph"}
    assert graphed == {(op, v) for op, spec in REGISTRY.items() for v in spec.variants}
    assert all(f["status"] != "error" for f in facts)
    json.dumps(facts)


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
    assert fact.to_dict()["kind"] == "kernel"


@on_cpu
def test_the_table_says_why_compiled_geglu_is_two_kernels():
    facts = kernel_facts(preset_config("e2b", Overrides(layers=2)), prompt_tokens=PROMPT)
    note = compile_note([f for f in facts if f["probe"] == "graph"])
    assert note and note.startswith("geglu compiled: several fused kernels") and "max_compile_depth" in note
