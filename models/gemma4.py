"""The Gemma 4 text decoder with every switchable op routed through one shared `OpTable`.

Structure, parameter names and layout follow mlx-lm's `gemma4_text`, so one checkpoint loads in
both. mlx-lm's own pieces are reused where no switchable op is involved: its ModelArgs, KV caches,
RoPE set-up, SwitchGLU, attention masks, weight sanitizing and quantization predicate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import gemma4_text as reference
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache, RotatingKVCache
from mlx_lm.models.gemma4_text import ModelArgs
from mlx_lm.models.switch_layers import SwitchGLU

from .config import ModelConfig
from .ops import OpTable, layer_rope, rope_arguments


class RMSNorm(nn.Module):
    def __init__(self, dims: int, eps: float, ops: OpTable, *, scaled: bool = True):
        super().__init__()
        if scaled:
            self.weight = mx.ones((dims,))
        self.eps = eps
        self.op_table = ops

    def __call__(self, x: mx.array) -> mx.array:
        return self.op_table.rms_norm(x, self.get("weight"), self.eps)


class MLP(nn.Module):
    def __init__(self, config: ModelArgs, layer_idx: int, ops: OpTable):
        super().__init__()
        first_shared = config.num_hidden_layers - config.num_kv_shared_layers
        double_wide = config.use_double_wide_mlp and layer_idx >= first_shared > 0
        width = config.intermediate_size * (2 if double_wide else 1)
        self.gate_proj = nn.Linear(config.hidden_size, width, bias=False)
        self.down_proj = nn.Linear(width, config.hidden_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, width, bias=False)
        self.op_table = ops

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(self.op_table.geglu(self.gate_proj(x), self.up_proj(x)))


class ExpertActivation(nn.Module):
    """SwitchGLU's activation slot: it calls activation(up, gate), for the dense and quantized
    expert paths alike."""

    def __init__(self, ops: OpTable):
        super().__init__()
        self.op_table = ops

    def __call__(self, up: mx.array, gate: mx.array) -> mx.array:
        return self.op_table.geglu(gate, up)


class Router(nn.Module):
    def __init__(self, config: ModelArgs, ops: OpTable):
        super().__init__()
        self.top_k = config.top_k_experts
        self.eps = config.rms_norm_eps
        self.proj = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.scale = mx.ones((config.hidden_size,))
        self.per_expert_scale = mx.ones((config.num_experts,))
        self.root_size = config.hidden_size**-0.5
        self.op_table = ops

    def __call__(self, x: mx.array) -> tuple[mx.array, mx.array]:
        x = self.op_table.rms_norm(x, self.scale * self.root_size, self.eps)
        scores = self.proj(x)
        top_k = mx.stop_gradient(
            mx.argpartition(scores, kth=-self.top_k, axis=-1)[..., -self.top_k :]
        )
        weights = mx.softmax(mx.take_along_axis(scores, top_k, axis=-1), axis=-1)
        return top_k, weights * self.per_expert_scale[top_k]


class Experts(nn.Module):
    def __init__(self, config: ModelArgs, ops: OpTable):
        super().__init__()
        self.switch_glu = SwitchGLU(
            input_dims=config.hidden_size,
            hidden_dims=config.moe_intermediate_size,
            num_experts=config.num_experts,
            activation=ExpertActivation(ops),
            bias=False,
        )

    def __call__(self, x: mx.array, top_k: mx.array, weights: mx.array) -> mx.array:
        return (mx.expand_dims(weights, -1) * self.switch_glu(x, top_k)).sum(-2)


class Attention(nn.Module):
    def __init__(self, config: ModelArgs, layer_idx: int, ops: OpTable):
        super().__init__()
        layer_type = config.layer_types[layer_idx]
        self.is_sliding = layer_type == "sliding_attention"
        self.has_kv = layer_idx < config.num_hidden_layers - config.num_kv_shared_layers
        self.head_dim = config.head_dim if self.is_sliding else config.global_head_dim
        self.n_heads = config.num_attention_heads
        self.use_k_eq_v = config.attention_k_eq_v and not self.is_sliding
        use_global_heads = self.use_k_eq_v and config.num_global_key_value_heads is not None
        self.n_kv_heads = (
            config.num_global_key_value_heads if use_global_heads else config.num_key_value_heads
        )
        self.op_table = ops

        dim, eps = config.hidden_size, config.rms_norm_eps
        self.q_proj = nn.Linear(dim, self.n_heads * self.head_dim, bias=False)
        if self.has_kv:
            self.k_proj = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
            if not self.use_k_eq_v:
                self.v_proj = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, dim, bias=False)
        self.q_norm = RMSNorm(self.head_dim, eps, ops)
        if self.has_kv:
            self.k_norm = RMSNorm(self.head_dim, eps, ops)
            self.v_norm = RMSNorm(self.head_dim, eps, ops, scaled=False)

        self.rope = layer_rope(config, layer_type, self.head_dim)
        self._rope_args = rope_arguments(self.rope)

    def _rotate(self, x: mx.array, offset: Any) -> mx.array:
        return self.op_table.rope(x, offset=offset, **self._rope_args)

    def __call__(self, x, mask=None, cache=None, shared_kv=None, offset=None):
        B, L, _ = x.shape
        queries = self.q_norm(self.q_proj(x).reshape(B, L, self.n_heads, self.head_dim))
        if shared_kv is not None:
            keys, values = shared_kv
        else:
            keys = self.k_proj(x).reshape(B, L, self.n_kv_heads, self.head_dim)
            values = (
                keys
                if self.use_k_eq_v
                else self.v_proj(x).reshape(B, L, self.n_kv_heads, self.head_dim)
            )
            offset = mx.array(cache.offset) if cache is not None else 0
            keys = self._rotate(self.k_norm(keys).transpose(0, 2, 1, 3), offset)
            values = self.v_norm(values).transpose(0, 2, 1, 3)
        queries = self._rotate(queries.transpose(0, 2, 1, 3), offset)
        if cache is not None:
            keys, values = cache.update_and_fetch(keys, values)
        # Gemma 4 normalizes q and k instead of scaling the scores.
        output = self.op_table.attention(queries, keys, values, scale=1.0, mask=mask)
        output = output.transpose(0, 2, 1, 3).reshape(B, L, -1)
        return self.o_proj(output), (keys, values), offset


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelArgs, layer_idx: int, ops: OpTable):
        super().__init__()
        dim, eps = config.hidden_size, config.rms_norm_eps
        self.layer_type = config.layer_types[layer_idx]
        self.self_attn = Attention(config, layer_idx, ops)
        self.mlp = MLP(config, layer_idx, ops)
        self.input_layernorm = RMSNorm(dim, eps, ops)
        self.post_attention_layernorm = RMSNorm(dim, eps, ops)
        self.pre_feedforward_layernorm = RMSNorm(dim, eps, ops)
        self.post_feedforward_layernorm = RMSNorm(dim, eps, ops)
        self.enable_moe = config.enable_moe_block
        if self.enable_moe:
            self.router = Router(config, ops)
            self.experts = Experts(config, ops)
            self.post_feedforward_layernorm_1 = RMSNorm(dim, eps, ops)
            self.post_feedforward_layernorm_2 = RMSNorm(dim, eps, ops)
            self.pre_feedforward_layernorm_2 = RMSNorm(dim, eps, ops)
        self.has_ple = bool(config.hidden_size_per_layer_input)
        if self.has_ple:
            self.per_layer_input_gate = nn.Linear(
                dim, config.hidden_size_per_layer_input, bias=False
            )
            self.per_layer_projection = nn.Linear(
                config.hidden_size_per_layer_input, dim, bias=False
            )
            self.post_per_layer_input_norm = RMSNorm(dim, eps, ops)
        self.layer_scalar = mx.ones((1,))
        self.op_table = ops

    def _feed_forward(self, h: mx.array) -> mx.array:
        if not self.enable_moe:
            return self.mlp(self.pre_feedforward_layernorm(h))
        dense = self.post_feedforward_layernorm_1(self.mlp(self.pre_feedforward_layernorm(h)))
        top_k, weights = self.router(h)
        sparse = self.experts(self.pre_feedforward_layernorm_2(h), top_k, weights)
        return dense + self.post_feedforward_layernorm_2(sparse)

    def __call__(self, x, mask=None, cache=None, per_layer_input=None, shared_kv=None, offset=None):
        attn, shared_kv, offset = self.self_attn(
            self.input_layernorm(x), mask, cache, shared_kv, offset
        )
        h = x + self.post_attention_layernorm(attn)
        h = h + self.post_feedforward_layernorm(self._feed_forward(h))
        if self.has_ple:
            gate = self.op_table.geglu(self.per_layer_input_gate(h), per_layer_input)
            h = h + self.post_per_layer_input_norm(self.per_layer_projection(gate))
        return h * self.layer_scalar, shared_kv, offset


class Gemma4TextModel(nn.Module):
    def __init__(self, config: ModelArgs, ops: OpTable):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_scale = config.hidden_size**0.5
        self.layers = [DecoderLayer(config, i, ops) for i in range(config.num_hidden_layers)]
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, ops)
        self.ple_dim = config.hidden_size_per_layer_input
        if self.ple_dim:
            ple_width = config.num_hidden_layers * self.ple_dim
            self.embed_tokens_per_layer = nn.Embedding(config.vocab_size_per_layer_input, ple_width)
            self.per_layer_model_projection = nn.Linear(config.hidden_size, ple_width, bias=False)
            self.per_layer_projection_norm = RMSNorm(self.ple_dim, config.rms_norm_eps, ops)
        self._kv_source = self._kv_sources(config)

    def _kv_sources(self, config: ModelArgs) -> list[int]:
        """For each layer, the layer whose K/V it uses: itself, or for a KV-shared layer the last
        earlier non-shared layer of its type."""
        first_shared = config.num_hidden_layers - config.num_kv_shared_layers
        last_of_type = {config.layer_types[i]: i for i in range(first_shared)}
        return [
            i if i < first_shared else last_of_type[config.layer_types[i]]
            for i in range(config.num_hidden_layers)
        ]

    def _per_layer_inputs(self, tokens: mx.array, h: mx.array) -> list[mx.array]:
        n_layers = len(self.layers)
        table = self.embed_tokens_per_layer(tokens) * (self.ple_dim**0.5)
        table = mx.unflatten(table, -1, (n_layers, self.ple_dim))
        projected = self.per_layer_model_projection(h) * (self.config.hidden_size**-0.5)
        projected = self.per_layer_projection_norm(
            mx.unflatten(projected, -1, (n_layers, self.ple_dim))
        )
        combined = (projected + table) * (2.0**-0.5)
        return [combined[:, :, i, :] for i in range(n_layers)]

    def _masks(self, h: mx.array, cache: list) -> list:
        by_type: dict[str, Any] = {}
        for layer, c in zip(self.layers, cache, strict=True):
            if layer.layer_type not in by_type:
                window = (
                    self.config.sliding_window if layer.layer_type == "sliding_attention" else None
                )
                by_type[layer.layer_type] = create_attention_mask(h, c, window_size=window)
        return [by_type[layer.layer_type] for layer in self.layers]

    def __call__(self, tokens: mx.array, cache: list | None = None) -> mx.array:
        h = self.embed_tokens(tokens) * self.embed_scale
        n_layers = len(self.layers)
        per_layer = self._per_layer_inputs(tokens, h) if self.ple_dim else [None] * n_layers
        cache = (cache or []) + [None] * (n_layers - len(cache or []))
        kv_and_offset: list[tuple] = [(None, None)] * n_layers
        for i, (layer, mask) in enumerate(zip(self.layers, self._masks(h, cache), strict=True)):
            shared_kv, offset = kv_and_offset[self._kv_source[i]]
            h, kv, offset = layer(h, mask, cache[i], per_layer[i], shared_kv, offset)
            kv_and_offset[i] = (kv, offset)
        return self.norm(h)


class Model(nn.Module):
    """mlx-lm's model protocol: `model(tokens, cache=...)`, `make_cache()`, `layers`, plus
    switchable ops."""

    def __init__(
        self, args: ModelArgs, ops: Mapping[str, str] | None = None, config: Mapping | None = None
    ):
        super().__init__()
        self.args = args
        self._config = dict(config or {})
        self.model_type = args.model_type
        self.op_table = OpTable(ops)
        self.model = Gemma4TextModel(args, self.op_table)
        if not args.tie_word_embeddings:
            self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    def __call__(self, inputs: mx.array, cache: list | None = None, **_: Any) -> mx.array:
        out = self.model(inputs, cache)
        out = (
            self.model.embed_tokens.as_linear(out)
            if self.args.tie_word_embeddings
            else self.lm_head(out)
        )
        cap = self.args.final_logit_softcapping
        return out if cap is None else self.op_table.softcap(out, cap)

    @property
    def config(self) -> ModelConfig:
        """The config.json this model would be saved with (quantization included)."""
        return self._config

    @property
    def vocab_size(self) -> int:
        return self.args.vocab_size

    @property
    def ops(self) -> dict[str, str]:
        return dict(self.op_table.assignment)

    def set_ops(self, ops: Mapping[str, str]) -> None:
        """Switch op variants in place; the weights stay as they are."""
        self.op_table.set(ops)

    @property
    def layers(self) -> list[DecoderLayer]:
        return self.model.layers

    def make_cache(self) -> list:
        first_shared = self.args.num_hidden_layers - self.args.num_kv_shared_layers
        return [
            KVCache()
            if self.args.layer_types[i] == "full_attention"
            else RotatingKVCache(max_size=self.args.sliding_window, keep=0)
            for i in range(first_shared)
        ]

    # Checkpoint handling is mlx-lm's, so both models read and write the same files.
    def sanitize(self, weights: dict[str, mx.array]) -> dict[str, mx.array]:
        return reference.Model.sanitize(self, weights)

    @property
    def quant_predicate(self):
        return reference.Model.quant_predicate.fget(self)
