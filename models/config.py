"""Model presets (data files in presets/: Gemma 4 and real configs of other mlx-lm architectures)
and the overrides a benchmark applies to them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import ModelConfigError

PRESET_DIR = Path(__file__).parent / "presets"

# A model's config.json as mlx-lm reads it (ModelArgs.from_dict): open by nature, each architecture
# with keys of its own, so it stays a mapping; what fusebench reads from it is read here
# (layer_geometry, expert_share, min_layers, runs_own_decoder) or by mlx-lm's own classes.
ModelConfig = dict[str, Any]
ConfigView = Mapping[str, Any]

# The dtype names a model can be built in; fusebench.models.loading maps them to mlx dtypes (this
# module stays free of mlx, so that reading an experiment never loads it).
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
# Bytes per element, for memory and roofline estimates made without building anything.
DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}

# mlx quantization modes as mlx-lm names them, with its default group size and bits.
QUANTIZE_MODES: dict[str, dict[str, Any]] = {
    "affine4": {"mode": "affine", "group_size": 64, "bits": 4},
    "affine8": {"mode": "affine", "group_size": 64, "bits": 8},
    "mxfp4": {"mode": "mxfp4", "group_size": 32, "bits": 4},
    "mxfp8": {"mode": "mxfp8", "group_size": 32, "bits": 8},
    "nvfp4": {"mode": "nvfp4", "group_size": 16, "bits": 4},
}


# Which code runs a model: fusebench's Gemma 4 decoder (fusebench.models.gemma4, PR 15587's choices
# such as its fused PLE gate), or mlx-lm's own classes with their op sites switched
# (fusebench.models.switched).
OWN_DECODER, MLX_LM = "fusebench", "mlx-lm"
IMPLEMENTATIONS = (OWN_DECODER, MLX_LM)
# The model types fusebench's decoder runs; any other runs in mlx-lm's classes only.
OWN_DECODER_TYPES = ("gemma4", "gemma4_text")


def runs_own_decoder(config: ConfigView, implementation: str | None) -> bool:
    """Whether the model runs in fusebench's decoder: a Gemma 4 config, unless mlx-lm's is asked
    for."""
    own = config.get("model_type") in OWN_DECODER_TYPES
    if implementation == OWN_DECODER and not own:
        raise ModelConfigError(
            f"implementation: {OWN_DECODER} runs {', '.join(OWN_DECODER_TYPES)} only; "
            f"{config.get('model_type')!r} runs in {MLX_LM}"
        )
    return own and implementation != MLX_LM


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_preset(name: str) -> ModelConfig:
    path = PRESET_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ModelConfigError(f"unknown preset {name!r}; choose from {', '.join(preset_names())}")
    return yaml.safe_load(path.read_text())


def min_layers(config: ConfigView) -> int:
    """The fewest layers a preset runs with: its `min_layers` where its model needs more than one
    (mlx-lm's gemma3_text reads the cache of its first global layer, the 6th)."""
    return int(config.get("min_layers", 1))


@dataclass(frozen=True)
class Overrides:
    layers: int | None = None
    dtype: str | None = None
    quantize: str | None = None

    def validate(self, max_layers: int, fewest: int = 1) -> None:
        if self.layers is not None and not fewest <= self.layers <= max_layers:
            raise ModelConfigError(
                f"layers={self.layers} is out of range; choose {fewest}..{max_layers}"
            )
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ModelConfigError(f"unknown dtype {self.dtype!r}; choose from {', '.join(DTYPES)}")
        if self.quantize is not None and self.quantize not in QUANTIZE_MODES:
            choices = ", ".join(QUANTIZE_MODES)
            raise ModelConfigError(
                f"unknown quantize mode {self.quantize!r}; choose from {choices}"
            )


def layer_types(num_layers: int, pattern: int) -> list[str]:
    """Sliding layers in blocks of `pattern`, each block closed by a full-attention layer, and the
    last layer full.

    At full depth this is the real models' layout; truncated, it keeps both attention shapes
    present.
    """
    return [
        "full_attention" if (i + 1) % pattern == 0 or i == num_layers - 1 else "sliding_attention"
        for i in range(num_layers)
    ]


def truncate(config: ModelConfig, layers: int) -> ModelConfig:
    """Keep `layers` layers with every per-layer shape exact: Gemma 4 by its layout
    (`truncate_gemma4`), any other model by keeping its first `layers` layers, with their layer
    types where the config lists them."""
    if config.get("model_type") in OWN_DECODER_TYPES:
        return truncate_gemma4(config, layers)
    truncated = dict(config, num_hidden_layers=layers)
    if config.get("layer_types"):
        truncated["layer_types"] = config["layer_types"][:layers]
    return truncated


def truncate_gemma4(config: ModelConfig, layers: int) -> ModelConfig:
    """Keep `layers` layers of a Gemma 4 config with every per-layer shape exact.

    The KV-shared share of the layers is kept (rounded), but the non-shared part holds at least two
    layers, so that a sliding and a full layer exist for the shared ones to reuse. Each part is laid
    out by `layer_types`, as the real models are.
    """
    total, shared = config["num_hidden_layers"], config.get("num_kv_shared_layers", 0)
    pattern = config["sliding_window_pattern"]
    n_shared = round(layers * shared / total) if shared else 0
    n_shared = min(n_shared, max(0, layers - 2))
    truncated = dict(config, num_hidden_layers=layers, num_kv_shared_layers=n_shared)
    truncated["layer_types"] = layer_types(layers - n_shared, pattern) + (
        layer_types(n_shared, pattern) if n_shared else []
    )
    return truncated


def full_config(config: ModelConfig) -> ModelConfig:
    """The config with its layer layout spelled out, as checkpoints store it."""
    if config.get("layer_types") or config.get("model_type") not in OWN_DECODER_TYPES:
        return config
    return truncate(config, config["num_hidden_layers"])


def preset_config(name: str, overrides: Overrides) -> ModelConfig:
    config = load_preset(name)
    overrides.validate(config["num_hidden_layers"], min_layers(config))
    if overrides.layers is not None:
        return truncate(config, overrides.layers)
    return full_config(config)


def attention_heads(config: ModelConfig, layer_type: str) -> tuple[int, int]:
    """(head_dim, KV heads) of a layer type, as fusebench.models.gemma4.Attention picks them: the
    one place the model's attention geometry is read from a config, for the benchmarks' shapes, work
    counts and memory estimates."""
    if layer_type == "sliding_attention":
        return config["head_dim"], config["num_key_value_heads"]
    global_heads = config.get("num_global_key_value_heads")
    kv_heads = (
        global_heads
        if config.get("attention_k_eq_v") and global_heads
        else config["num_key_value_heads"]
    )
    return config["global_head_dim"], kv_heads


@dataclass(frozen=True)
class LayerGeometry:
    """One layer's attention as a config lays it out: its window is None for full attention;
    owns_kv: it keeps a cache of its own (Gemma 4's KV-shared layers reuse another's)."""

    heads: int
    head_dim: int
    kv_heads: int
    window: int | None
    owns_kv: bool


def layer_geometry(config: ConfigView) -> list[LayerGeometry]:
    """Every layer's attention geometry: the one place work counts and memory estimates read it.

    Gemma 4 by its own layout (attention_heads, KV sharing). Any other model by the keys
    Hugging Face configs share: head_dim (else hidden_size / heads), num_key_value_heads (else the
    heads), and sliding layers where `layer_types` says so or, without it, where
    `sliding_window_pattern` does as mlx-lm's gemma3_text reads it (every pattern-th layer global);
    otherwise every layer attends to the full context."""
    heads, window = config["num_attention_heads"], config.get("sliding_window")
    count = config["num_hidden_layers"]
    if config.get("model_type") in OWN_DECODER_TYPES:
        types = full_config(dict(config))["layer_types"]
        owners = count - config.get("num_kv_shared_layers", 0)
        return [
            LayerGeometry(heads, *attention_heads(config, kind), _window(kind, window), i < owners)
            for i, kind in enumerate(types)
        ]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads = config.get("num_key_value_heads") or heads
    return [
        LayerGeometry(heads, head_dim, kv_heads, _window(kind, window), True)
        for kind in _layer_types(config)
    ]


def _layer_types(config: ConfigView) -> list[str]:
    count, pattern = config["num_hidden_layers"], config.get("sliding_window_pattern")
    if config.get("layer_types"):
        return list(config["layer_types"])[:count]
    if pattern:
        return [
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
            for i in range(count)
        ]
    return ["full_attention"] * count


def _window(layer_type: str, window: int | None) -> int | None:
    return window if layer_type == "sliding_attention" else None


def expert_share(config: ConfigView) -> float:
    """The share of a MoE layer's experts each token is routed to (0 for a dense model): Gemma 4's
    top_k_experts, or num_experts_per_tok as Qwen3-MoE and Mixtral configs name it."""
    experts = config.get("num_experts") or config.get("num_local_experts") or 0
    if not experts or config.get("enable_moe_block") is False:
        return 0.0
    routed = config.get("top_k_experts") or config.get("num_experts_per_tok") or 0
    return routed / experts
