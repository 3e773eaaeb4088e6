"""Roofline: the work one benchmark cell does, what a trial achieved, and how close that came to the
machine's peak.

Work is counted from the model's exact parameter shapes (the lazily built model: nothing is
computed) and its attention layout:
- prefill FLOPs: 2 per parameter and token for every matmul weight in the path, plus the attention
  FLOPs over the (query, key) pairs the causal and sliding-window masks leave. The LM head runs on
  the last position of each sequence only, as in mlx-lm's prefill, which fusebench.measure.worker
  times;
- gen bytes per decode step: the active weights read once, plus the KV cache read and the new K/V
  written.
Active parameters are all parameters, less the embedding tables that are only looked up (the token
table when it is not the tied LM head, and the per-layer-input table), with the MoE experts counted
at their top_k/num_experts share.

Peaks come from a measurement (fusebench.measure.machine.peaks.probe_peaks) or from the shipped
table of known chips (bench/data/chips.yaml).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from functools import cache, lru_cache
from pathlib import Path

import yaml
from mlx.utils import tree_flatten

from fusebench.models.config import (
    DTYPE_BYTES,
    LayerGeometry,
    ModelConfig,
    expert_share,
    layer_geometry,
)
from fusebench.models.loading import MX_DTYPES, build_model, cast_weights, quantize_weights

from ...core.cell import PeakPercents, Rates
from ...core.header import Env, Peak, PeakProbe
from ...core.typed import from_mapping

CHIPS_FILE = Path(__file__).parents[2] / "data" / "chips.yaml"
CHIP_FIELDS = ("name", "match", "fp32_tflops", "bf16_tflops", "memory_gbps", "source")


# --- parameters ----------------------------------------------------------------------------------


def parameter_role(name: str, tied: bool) -> str:
    """Which part of the work a parameter (by its tree_flatten name) belongs to: one of ROLES."""
    if name.startswith("model.embed_tokens_per_layer."):
        return "lookup"
    if name.startswith("model.embed_tokens."):
        return "head" if tied else "lookup"
    if name.startswith("lm_head."):
        return "head"
    # fusebench's Gemma 4 experts, and mlx-lm's SwitchGLU experts (Qwen3-MoE, Mixtral)
    return "experts" if ".experts." in name or ".switch_mlp." in name else "body"


@dataclass(frozen=True)
class PerRole:
    """One figure for each role a parameter may have (ROLES)."""

    body: int
    head: int
    experts: int
    lookup: int

    def total(self) -> int:
        return self.body + self.head + self.experts + self.lookup


ROLES = tuple(field.name for field in fields(PerRole))


@dataclass(frozen=True)
class RoleTotals:
    """Per role: parameter count (of the float model) and bytes (in the model's dtype, quantized if
    asked)."""

    params: PerRole
    nbytes: PerRole


@lru_cache(maxsize=32)
def _role_totals(config_json: str, dtype: str, quantize: str | None) -> RoleTotals:
    config = json.loads(config_json)
    parameters = tree_flatten(build_model(config).parameters())
    # Tied: the model has no LM head of its own (each architecture's default when the config is
    # silent is its own, so the built model says it, not the config).
    tied = not any(name.startswith("lm_head.") for name, _ in parameters)
    counts = dict.fromkeys(ROLES, 0)
    for name, value in parameters:
        counts[parameter_role(name, tied)] += value.size
    stored = build_model(config)
    cast_weights(stored, MX_DTYPES[dtype])
    if quantize:
        quantize_weights(stored, quantize)
    nbytes = dict.fromkeys(ROLES, 0)
    for name, value in tree_flatten(stored.parameters()):
        nbytes[parameter_role(name, tied)] += value.nbytes
    return RoleTotals(PerRole(**counts), PerRole(**nbytes))


def role_totals(
    config: ModelConfig, dtype: str = "float32", quantize: str | None = None
) -> RoleTotals:
    """Cached per config: building even the lazy 31B takes a moment, and a report asks once per
    cell."""
    return _role_totals(json.dumps(config, sort_keys=True), dtype, quantize)


# --- attention -----------------------------------------------------------------------------------


def attended_pairs(length: int, window: int | None = None) -> int:
    """(query, key) pairs a causal prefill of `length` tokens attends to, each query seeing at most
    `window` keys (itself included), as mlx-lm's create_causal_mask(window_size=...) allows."""
    if window is None or length <= window:
        return length * (length + 1) // 2
    return window * (window + 1) // 2 + (length - window) * window


def kv_bytes_per_token(layer: LayerGeometry, itemsize: int) -> int:
    # K and V are both cached, even in K=V layers, where V is K normalized differently.
    return 2 * layer.kv_heads * layer.head_dim * itemsize


def _keys_read(prompt_tokens: int, steps: int, window: int | None) -> int:
    """Keys one sequence's decode steps read in a layer: step j attends to prompt + j keys, capped
    by the window."""
    return sum(min(prompt_tokens + j, window or prompt_tokens + j) for j in range(1, steps + 1))


# --- the work of a cell --------------------------------------------------------------------------


@dataclass(frozen=True)
class CellWork:
    """The work of one trial of a cell: the prefill's FLOPs and the generation's bytes."""

    params_total: int
    params_active: int  # per token: the body, the experts at their top_k share, the LM head
    params_head: int
    params_experts: int
    params_lookup: int
    prefill_tokens: int
    prefill_matmul_flops: int
    prefill_attention_flops: int
    prefill_flops: int
    # what the prefill reads at memory speed: its last token's step (every weight a token routes
    # to), and every expert's weights once for the tokens before it (a few rows an expert: too few
    # to hide the read behind the matmul)
    prefill_bytes: int
    gen_steps: int
    gen_weight_bytes_per_step: int
    gen_kv_read_bytes: int
    gen_kv_write_bytes: int
    gen_bytes: int
    gen_bytes_per_token: float | None  # None where the trial does not generate


def cell_work(
    config: ModelConfig,
    prompt_tokens: int,
    gen_tokens: int,
    batch: int,
    *,
    dtype: str = "float32",
    quantize: str | None = None,
) -> CellWork:
    """FLOPs of the prefill and bytes moved by the generation of one trial of a cell.

    `gen_tokens - 1` decode steps follow the prefill (its first token comes with the prefill), as
    fusebench.measure.worker times them.
    """
    totals = role_totals(config, dtype, quantize)
    params, nbytes = totals.params, totals.nbytes
    routed = expert_share(config)
    per_token_params = params.body + round(params.experts * routed)
    layers = layer_geometry(config)
    attention_flops = batch * sum(
        4 * layer.heads * layer.head_dim * attended_pairs(prompt_tokens, layer.window)
        for layer in layers
    )
    matmul_flops = 2 * per_token_params * batch * prompt_tokens + 2 * params.head * batch
    steps = max(0, gen_tokens - 1)
    # A decode step of `batch` sequences reads every expert any of them routes to: at most all of
    # them.
    step_expert_share = min(1.0, batch * routed)
    weight_bytes = nbytes.body + nbytes.head + round(nbytes.experts * step_expert_share)
    prompt_expert_share = min(1.0, batch * prompt_tokens * routed)
    prefill_bytes = nbytes.body + nbytes.head + round(nbytes.experts * prompt_expert_share)
    itemsize = DTYPE_BYTES[dtype]
    kv_write = (
        batch
        * steps
        * sum(kv_bytes_per_token(layer, itemsize) for layer in layers if layer.owns_kv)
    )
    kv_read = batch * sum(
        kv_bytes_per_token(layer, itemsize) * _keys_read(prompt_tokens, steps, layer.window)
        for layer in layers
    )
    gen_bytes = steps * weight_bytes + kv_read + kv_write
    return CellWork(
        params_total=params.total(),
        params_active=per_token_params + params.head,
        params_head=params.head,
        params_experts=params.experts,
        params_lookup=params.lookup,
        prefill_tokens=batch * prompt_tokens,
        prefill_matmul_flops=matmul_flops,
        prefill_attention_flops=attention_flops,
        prefill_flops=matmul_flops + attention_flops,
        prefill_bytes=prefill_bytes,
        gen_steps=steps,
        gen_weight_bytes_per_step=weight_bytes,
        gen_kv_read_bytes=kv_read,
        gen_kv_write_bytes=kv_write,
        gen_bytes=gen_bytes,
        gen_bytes_per_token=gen_bytes / (batch * steps) if steps else None,
    )


def achieved(prefill_s: float, gen_s: float | None, work: CellWork, steps: int) -> Rates:
    """TFLOP/s of a trial's prefill and GB/s of its generation of `steps` decode steps (None where
    it did not generate); a warm-up runs fewer than its cell's."""
    return Rates(
        prefill_tflops=work.prefill_flops / prefill_s / 1e12,
        gen_gbps=work.gen_bytes * steps / work.gen_steps / gen_s / 1e9
        if gen_s and work.gen_steps and steps
        else None,
    )


def percent_of_peak(rates: Rates, peak: Peak | None, dtype: str = "float32") -> PeakPercents:
    """achieved() as % of a peak_for() peak; None where either side is unknown.

    A rate above the peak means the peak is wrong, not that the machine beat physics: its percentage
    is None and `above_peak` names the metric, so a report says "peak underestimated" instead of
    printing 150%.
    """
    prefill = _percent(rates.prefill_tflops, peak.compute_roof(dtype) if peak else None)
    gen = _percent(rates.gen_gbps, peak.memory_gbps if peak else None)
    above = [
        metric
        for metric, pct in (("prefill", prefill), ("gen", gen))
        if pct is not None and pct > 100.0
    ]
    return PeakPercents(
        prefill_pct_of_peak=None if "prefill" in above else prefill,
        gen_pct_of_peak=None if "gen" in above else gen,
        above_peak=tuple(above),
    )


def _percent(value: float | None, roof: float | None) -> float | None:
    return None if value is None or not roof else 100.0 * value / roof


# --- peaks ---------------------------------------------------------------------------------------


@cache
def load_chips(path: Path = CHIPS_FILE) -> tuple[Peak, ...]:
    """The known chips, each checked to have every field of CHIP_FIELDS."""
    chips = yaml.safe_load(path.read_text())["chips"]
    for i, chip in enumerate(chips):
        missing = [f for f in CHIP_FIELDS if f not in chip]
        if missing:
            raise ValueError(
                f"{path}: chips[{i}] ({chip.get('name', '?')}): missing {', '.join(missing)}"
            )
    return tuple(from_mapping(Peak, chip) for chip in chips)


def match_chip(device: str, chips: tuple[Peak, ...] | None = None) -> Peak | None:
    """The chip whose pattern matches the longest part of the device name ("Apple M2 Max" is the M2
    Max, not the M2), or None."""
    best, best_length = None, 0
    for chip in chips or load_chips():
        for pattern in chip.match or ():
            found = re.search(pattern, device, flags=re.IGNORECASE)
            if found and len(found.group(0)) > best_length:
                best, best_length = chip, len(found.group(0))
    return best


def probe_peak(probe: PeakProbe) -> Peak:
    """A fusebench.measure.machine.peaks.probe_peaks() result in the form of a chips.yaml entry."""
    return Peak(
        name="measured on this machine",
        fp32_tflops=probe.matmul_gflops / 1000,
        bf16_tflops=None,
        memory_gbps=max(probe.copy_gbps, probe.gemv_read_gbps),
        source=f"fusebench env --probe: {probe.matmul_shape} matmul; the faster of a "
        f"{probe.copy_bytes // 2**20} MiB copy (read + write) and a matrix-vector read of an "
        "LM-head-sized matrix (262144 x 1536 fp32)",
        confidence="measured",
    )


def peak_for(env: Env, probe: PeakProbe | None = None) -> Peak | None:
    """The peak to compare with: the probe's if given, else the known chip env.device names, else
    None.

    The table lists GPUs only, so a CPU-backend run (even on an Apple chip) matches nothing there.
    """
    if probe is not None:
        return probe_peak(probe)
    if env.backend == "cpu":
        return None
    return match_chip(env.device)
