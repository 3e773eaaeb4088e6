"""mlx-lm's own models with their op sites switched (fusebench.models.switched): every variant of
every switched op agrees with the unswitched model, the names are bound back after every call, and
fusebench's Gemma 4 decoder agrees with mlx-lm's gemma4_text on one checkpoint."""

from __future__ import annotations

import json

import mlx.core as mx
import mlx_lm.models.activations as activations
import mlx_lm.models.base as base
import mlx_lm.models.qwen3 as qwen3
import pytest
from conftest import SMALL_MLX_LM, save_mlx_lm_checkpoint

from fusebench.models.errors import ModelConfigError, UnknownOpError
from fusebench.models.gemma4 import Model
from fusebench.models.loading import build_model, load_model, save_checkpoint, seed_weights
from fusebench.models.registry import REGISTRY
from fusebench.models.switched import SwitchedModel, called_ops, check_switched_ops

FAST_RMS_NORM, FAST_ROPE = mx.fast.rms_norm, mx.fast.rope

# One of each kind: a dense Llama-style MLP, qk-norm, a fused-QKV model (phi3), MoE experts (their
# swiglu in switch_layers), sliding windows with scaled rope (gemma3_text), traditional rope.
ARCHITECTURES = {
    "qwen3": {"model_type": "qwen3"},
    "llama": {
        "model_type": "llama",
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    },
    "phi3": {"model_type": "phi3"},
    "qwen3_moe": {
        "model_type": "qwen3_moe",
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
    },
    "gemma3_text": {
        "model_type": "gemma3_text",
        "num_hidden_layers": 6,
        "sliding_window": 4,
        "sliding_window_pattern": 6,
        "query_pre_attn_scalar": 16,
        "rope_local_base_freq": 10000.0,
    },
    "traditional rope": {"model_type": "llama", "rope_traditional": True},
}
TOKENS = mx.array([[3, 17, 42, 9, 100, 7, 55, 21]])


def small_model(name: str) -> SwitchedModel:
    model = build_model({**SMALL_MLX_LM, **ARCHITECTURES[name]})
    assert isinstance(model, SwitchedModel)
    seed_weights(model, seed=1, dtype=mx.float32)
    return model


def shipped_logits(model: SwitchedModel) -> mx.array:
    """The logits of prefill then one decode step as mlx-lm computes them, nothing switched."""
    cache = model.make_cache()
    prefill = model.model(TOKENS, cache=cache)
    return mx.concatenate([prefill, model.model(TOKENS[:, :1], cache=cache)], axis=1)


def switched_logits(model: SwitchedModel, ops: dict[str, str]) -> mx.array:
    model.set_ops(ops)
    cache = model.make_cache()
    prefill = model(TOKENS, cache=cache)
    return mx.concatenate([prefill, model(TOKENS[:, :1], cache=cache)], axis=1)


def assert_bound_back() -> None:
    assert qwen3.swiglu is activations.swiglu
    assert qwen3.scaled_dot_product_attention is base.scaled_dot_product_attention
    assert mx.fast.rms_norm is FAST_RMS_NORM and mx.fast.rope is FAST_ROPE


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_every_variant_of_every_switched_op_agrees_with_mlx_lm(name):
    model = small_model(name)
    shipped = shipped_logits(model)
    used = called_ops(model, TOKENS)
    assert {"attention", "rms_norm", "rope"} <= set(used)
    for op in used:
        for variant in REGISTRY[op].variants:
            logits = switched_logits(model, {op: variant})
            error = mx.abs(logits - shipped).max().item()
            assert error < 1e-4 * max(1.0, mx.abs(shipped).max().item()), (op, variant, error)
    assert_bound_back()


def test_the_switch_reaches_every_call_and_is_counted_per_site():
    model = small_model("qwen3_moe")
    counts = model.count_calls(TOKENS)
    assert counts["mlx_lm.models.switch_layers.swiglu"] == 2  # the experts of both layers
    assert counts["mlx_lm.models.qwen3_moe.scaled_dot_product_attention"] == 2
    assert counts["mlx.core.fast.rope"] == 4  # q and k of both layers
    assert_bound_back()


def test_names_are_bound_back_when_a_forward_pass_fails():
    model = small_model("qwen3")
    with pytest.raises(ValueError):
        model(mx.zeros((1, 2, 3)))  # not token ids
    assert_bound_back()


def test_an_op_the_model_never_calls_is_named_with_those_it_does():
    variants = {"a": {"geglu": "unfused"}, "b": {"geglu": "compiled"}}
    with pytest.raises(
        UnknownOpError,
        match="switch geglu, which qwen3 never calls; its "
        "switchable ops are attention, rms_norm, rope, swiglu",
    ):
        check_switched_ops(small_model("qwen3"), variants, TOKENS)
    gemma = load_model("tiny")
    swiglu = {"a": {"swiglu": "unfused"}, "b": {"swiglu": "compiled"}}
    with pytest.raises(UnknownOpError, match="switch swiglu, which gemma4_text never calls"):
        check_switched_ops(gemma, swiglu, TOKENS)
    check_switched_ops(gemma, {"a": {"swiglu": "unfused"}, "b": {"swiglu": "unfused"}}, TOKENS)


def _checkpoint(path, name, *, quantize=False):
    return save_mlx_lm_checkpoint(small_model(name), path, quantize=quantize)


def test_a_checkpoint_of_any_architecture_loads_in_mlx_lm_classes(tmp_path):
    path = _checkpoint(tmp_path / "qwen3", "qwen3")
    model = load_model(str(path), ops={"swiglu": "unfused", "attention": "manual"})
    assert isinstance(model, SwitchedModel) and model.model_type == "qwen3"
    assert model.ops["swiglu"] == "unfused"
    reference = load_model(str(path))
    assert mx.allclose(model(TOKENS), reference.model(TOKENS), atol=1e-4)


def test_a_4_bit_checkpoint_runs_switched(tmp_path):
    path = _checkpoint(tmp_path / "q4", "llama", quantize=True)
    model = load_model(str(path))
    assert json.loads((path / "config.json").read_text())["quantization"]["bits"] == 4
    shipped = model.model(TOKENS)
    for ops in ({"swiglu": "unfused", "attention": "manual"}, {"rms_norm": "composed"}):
        model.set_ops(ops)
        assert mx.allclose(model(TOKENS), shipped, atol=1e-4)
    assert_bound_back()


def test_gemma4_runs_both_ways_and_agrees(tmp_path):
    path = save_checkpoint(load_model("tiny", seed=3), tmp_path / "gemma")
    own = load_model(str(path))
    theirs = load_model(str(path), implementation="mlx-lm")
    assert isinstance(own, Model) and isinstance(theirs, SwitchedModel)
    for ops in ({}, {"geglu": "compiled", "softcap": "compiled", "attention": "sdpa"}):
        own.set_ops(ops)
        theirs.set_ops(ops)
        assert mx.allclose(own(TOKENS), theirs(TOKENS), atol=1e-5)


def test_fusebench_decoder_runs_gemma4_only():
    with pytest.raises(ModelConfigError, match="implementation: fusebench runs gemma4"):
        load_model("qwen3-0.6b", layers=1, implementation="fusebench")
