"""The memory guard: estimate what a model will need before loading it, and skip it if that will not
fit.

Loading a model that does not fit would swap the machine to a crawl or get the worker killed; a
`skip` record with the estimate says the same thing honestly and costs nothing.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from fusebench.models.config import (
    DTYPE_BYTES,
    ModelConfig,
    Overrides,
    layer_geometry,
    preset_config,
)
from fusebench.models.loading import parameter_bytes, read_checkpoint_config, text_config

from ...core.experiment import Experiment, ModelSpec

# Below this fraction of available memory a model is run; the rest is left to the OS and the
# interpreter.
HEADROOM = 0.85


def model_config(spec: ModelSpec) -> ModelConfig:
    if spec.path:
        return text_config(read_checkpoint_config(_path(spec)))
    return preset_config(spec.preset, Overrides(spec.layers, spec.dtype, spec.quantize))


def _path(spec: ModelSpec) -> Path:
    return Path(spec.path)


def weight_bytes(spec: ModelSpec) -> int:
    if spec.path:
        files = _path(spec).glob("model*.safetensors")
        return sum(f.stat().st_size for f in files)
    return parameter_bytes(model_config(spec), spec.dtype, spec.quantize)


def working_bytes(config: ModelConfig, spec: ModelSpec, exp: Experiment) -> int:
    """KV cache at the longest context, plus the largest transient of one prefill chunk: the
    attention scores of the manual path or the MLP's intermediate activations, whichever is
    bigger."""
    width = DTYPE_BYTES[spec.dtype]
    longest = max([w.prompt_tokens + w.gen_tokens for w in exp.workloads] + list(exp.depths))
    batch = max(w.batch for w in exp.workloads)
    chunk = min(exp.prefill_step_size, longest)
    # K and V of every layer that owns a cache, over the whole context (an upper bound for the
    # sliding ones).
    owners = [layer for layer in layer_geometry(config) if layer.owns_kv]
    kv = 2 * sum(layer.kv_heads * layer.head_dim for layer in owners) * longest * batch * width
    scores = batch * config["num_attention_heads"] * chunk * longest * 4 * 2
    mlp_width = config["intermediate_size"] * (2 if config.get("use_double_wide_mlp") else 1)
    mlp = 3 * batch * chunk * mlp_width * 4
    logits = 2 * batch * config["vocab_size"] * 4
    return kv + max(scores, mlp) + logits


def available_bytes() -> int:
    """Memory a new process can use now: MemAvailable on Linux, physical memory elsewhere."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if platform.system() == "Darwin":
        return int(
            subprocess.run(["sysctl", "-n", "hw.memsize"], capture_output=True, text=True).stdout
        )
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def estimate_bytes(spec: ModelSpec, exp: Experiment) -> int:
    return weight_bytes(spec) + working_bytes(model_config(spec), spec, exp)


def memory_verdict(spec: ModelSpec, exp: Experiment, copies: int = 1) -> tuple[bool, str]:
    """(fits, reason): whether `copies` of the model (one per build, or a duet's two, side by side)
    fit in available memory, and the figures either way."""
    need, have = copies * estimate_bytes(spec, exp), available_bytes()
    copies_text = f" for {copies} copies" if copies > 1 else ""
    figures = f"needs ~{need / 2**30:.1f} GiB{copies_text}"
    figures += f", {have / 2**30:.1f} GiB available"
    if need > HEADROOM * have:
        return False, f"does not fit in memory: {figures}"
    return True, figures
