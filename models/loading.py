"""Build a model from a preset with seeded weights, or load one from a local mlx-lm checkpoint
directory: Gemma 4 in fusebench's own decoder (fusebench.models.gemma4) by default, any other
architecture mlx-lm can load in mlx-lm's own classes (fusebench.models.switched), Gemma 4 too when
the experiment asks."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

# Nothing here may reach a model hub, not even through a library default.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models import gemma4 as reference_multimodal
from mlx_lm.utils import _get_classes as mlx_lm_classes
from mlx_lm.utils import load_model as mlx_lm_load_model
from mlx_lm.utils import quantize_model, save_config, save_model

from .config import (
    QUANTIZE_MODES,
    ConfigView,
    ModelConfig,
    Overrides,
    preset_config,
    runs_own_decoder,
)
from .errors import ModelConfigError
from .gemma4 import Model, ModelArgs
from .switched import SwitchedModel

# Either kind of model: fusebench's Gemma 4 decoder, or an mlx-lm model with switchable sites.
AnyModel = Model | SwitchedModel
MX_DTYPES: dict[str, mx.Dtype] = {
    "float32": mx.float32,
    "bfloat16": mx.bfloat16,
    "float16": mx.float16,
}

# Seeded weights are cyclic reads of one pool of normal samples rather than fresh draws per tensor:
# mx.random.normal makes ~25M values/s on a 2-core CPU; copying from a pool is several times faster.
# The odd pool length keeps rows of power-of-two widths from repeating each other.
_POOL_SIZE = (1 << 22) + 15


def build_model(config: ConfigView, implementation: str | None = None) -> AnyModel:
    """The model with lazy parameters: every shape is known, nothing is computed or allocated."""
    if runs_own_decoder(config, implementation):
        return Model(ModelArgs.from_dict(dict(config)), None, config)
    model_class, args_class = _mlx_lm_classes(config)
    return SwitchedModel(model_class(args_class.from_dict(dict(config))), config)


def _mlx_lm_classes(config: ConfigView) -> tuple[type, type]:
    try:
        return mlx_lm_classes(dict(config))
    except ValueError as err:  # mlx-lm has no module for the model_type
        raise ModelConfigError(f"model_type {config.get('model_type')!r}: {err}") from None


def _module(model: AnyModel) -> nn.Module:
    """The nn.Module holding the weights."""
    return model.model if isinstance(model, SwitchedModel) else model


def _pool_slice(pool: mx.array, name: str, size: int) -> mx.array:
    """`size` values of the pool, read cyclically from a start that depends on the parameter's
    name."""
    start = zlib.crc32(name.encode()) % _POOL_SIZE
    if start + size <= _POOL_SIZE:
        return pool[start : start + size]
    # One write of `size` values: the pool's tail, whole pools, then its head. (Tiling the pool
    # and slicing wrote each value twice; benchmarks/weights_speed.py measures both.)
    whole, head = divmod(size - (_POOL_SIZE - start), _POOL_SIZE)
    return mx.concatenate([pool[start:], *([pool] * whole), pool[:head]])


def _init_mean_std(shape: tuple[int, ...]) -> tuple[float, float]:
    """Norms and scales near 1; matrices scaled by fan-in, so activations and logits stay O(1)."""
    return (1.0, 0.1) if len(shape) < 2 else (0.0, shape[-1] ** -0.5)


def seed_weights(model: AnyModel, seed: int, dtype: mx.Dtype) -> None:
    """Materialize deterministic weights: the same seed gives the same weights, bit for bit."""
    module = _module(model)
    unit_pool = mx.random.normal((_POOL_SIZE,), key=mx.random.key(seed))
    scaled_pools: dict[tuple[float, float], mx.array] = {}
    seeded = []
    for name, param in tree_flatten(module.parameters()):
        mean_std = _init_mean_std(param.shape)
        if mean_std not in scaled_pools:
            scaled_pools[mean_std] = (unit_pool * mean_std[1] + mean_std[0]).astype(dtype)
            mx.eval(scaled_pools[mean_std])
        values = _pool_slice(scaled_pools[mean_std], name, param.size).reshape(param.shape)
        # One tensor at a time keeps the peak near the model's size.
        mx.eval(values)
        seeded.append((name, values))
    module.update(tree_unflatten(seeded))


def quantize_weights(model: AnyModel, mode_name: str) -> None:
    """Quantize in place as mlx-lm does (its predicate), recording the quantization in the model's
    config."""
    params, module = QUANTIZE_MODES[mode_name], _module(model)
    # mlx-lm prints a bits-per-weight line; a benchmark's output is not the place for it.
    with contextlib.redirect_stdout(io.StringIO()):
        _, config = quantize_model(
            module,
            dict(model.config),
            params["group_size"],
            params["bits"],
            mode=params["mode"],
            quant_predicate=getattr(module, "quant_predicate", None),
        )
    model.config.update(config)


def cast_weights(model: AnyModel, dtype: mx.Dtype) -> None:
    module = _module(model)
    floats = tree_flatten(module.parameters())
    module.update(
        tree_unflatten(
            [(k, v.astype(dtype)) for k, v in floats if mx.issubdtype(v.dtype, mx.floating)]
        )
    )


def load_model(
    source: str | Path,
    *,
    layers: int | None = None,
    dtype: str | None = None,
    quantize: str | None = None,
    seed: int = 0,
    ops: Mapping[str, str] | None = None,
    implementation: str | None = None,
    weights_cache: WeightsCache | None = None,
) -> AnyModel:
    """A preset name (seeded weights) or a local mlx-lm checkpoint directory, with its overrides
    applied, in fusebench's decoder or mlx-lm's classes (`implementation`, see
    fusebench.models.config.runs_own_decoder). With `weights_cache`, a preset's seeded weights are
    read from that folder when a run wrote them there before, else seeded and written there
    (`WeightsCache.read_or_write`)."""
    overrides = Overrides(layers, dtype, quantize)
    if is_checkpoint_path(source):
        model = _load_checkpoint(Path(source), overrides, implementation)
    else:
        config = preset_config(str(source), overrides)
        model = build_model(config, implementation)
        mx_dtype = MX_DTYPES[dtype or "float32"]
        if weights_cache is None:
            seed_weights(model, seed, mx_dtype)
        else:
            path = weights_cache.folder / weights_file_name(config, seed, mx_dtype)
            weights_cache.read_or_write(model, path, seed, mx_dtype)
        if quantize:
            quantize_weights(model, quantize)
    model.set_ops(ops or {})
    return model


# Bumped whenever seed_weights would write other values for the same preset, layers and seed.
WEIGHTS_FORMAT = 1


@dataclass
class WeightsCache:
    """Where presets' seeded weights are kept between loads, the seconds this process spent
    writing them there (a one-time cost, which a caller may keep apart from loading), and why the
    weights it made could not be kept there ("" when they were read or written)."""

    folder: Path
    written_s: float = 0.0
    not_kept: str = ""

    def read_or_write(self, model: AnyModel, path: Path, seed: int, dtype: mx.Dtype) -> None:
        """The weights seed_weights would make, read from `path` where an earlier load wrote them
        (a read from the page cache is about twice as fast as making them here:
        benchmarks/weights_speed.py), else made and written there (a temporary name, then renamed:
        a reader sees the whole file or none). A file that does not fit the model is made again
        and said on stderr. Weights the disk has no room for are not written (a failed write of
        gigabytes would cost its seconds on every run): `not_kept` says why, and the seconds
        spent count as loading, since the next load pays them again."""
        module = _module(model)
        if path.is_file():
            try:
                module.load_weights(list(mx.load(str(path)).items()))
                mx.eval(module.parameters())
                return
            except (ValueError, RuntimeError, OSError) as err:
                print(f"weights cache: {path} unusable ({err}); made again", file=sys.stderr)
        seed_weights(model, seed, dtype)
        began = time.perf_counter()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            needed = sum(v.nbytes for _, v in tree_flatten(module.parameters())) / 2**30
            free = shutil.disk_usage(path.parent).free / 2**30
            if free < needed:
                self.not_kept = f"{free:.1f} GiB free in {path.parent}, {needed:.1f} GiB needed"
                return
            _write_whole(module, path)
        except (OSError, RuntimeError) as err:
            self.not_kept = f"{path} not written: {err}"
            print(f"weights cache: {self.not_kept}", file=sys.stderr)
            return
        self.written_s += time.perf_counter() - began


def weights_file_name(config: ConfigView, seed: int, dtype: mx.Dtype) -> str:
    """A preset's seeded weights' file: the model's config (so a changed preset file is another
    file), the seed, the dtype and the generator's format."""
    digest = hashlib.sha256(json.dumps(dict(config), sort_keys=True).encode()).hexdigest()[:16]
    name = str(config.get("model_type", "model"))
    dtype_name = str(dtype).rsplit(".", 1)[-1]
    return f"{name}-{digest}-seed{seed}-{dtype_name}-v{WEIGHTS_FORMAT}.safetensors"


def _write_whole(module: nn.Module, path: Path) -> None:
    """The module's weights at `path`, synced to disk; a failed write leaves no file behind."""
    # mx.save_safetensors names its file *.safetensors whatever it is given
    partial = path.with_name(f".{path.stem}.{os.getpid()}.partial.safetensors")
    try:
        mx.save_safetensors(str(partial), dict(tree_flatten(module.parameters())))
        # on disk before the first trial: the kernel's writeback of gigabytes would otherwise run
        # beside the rounds that follow (results/plan-zen4: the run that wrote them scattered 2-3x)
        descriptor = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(partial, path)
    except (OSError, RuntimeError):
        partial.unlink(missing_ok=True)
        raise


def is_checkpoint_path(source: str | Path) -> bool:
    text = str(source)
    return isinstance(source, Path) or "/" in text or os.sep in text or text.startswith(".")


def read_checkpoint_config(path: Path) -> ModelConfig:
    """config.json of a checkpoint directory, checked enough that loading it cannot fail
    obscurely."""
    if not path.is_dir():
        raise ModelConfigError(f"{path}: no such checkpoint directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelConfigError(
            f"{config_file}: missing; a checkpoint directory needs config.json and *.safetensors"
        )
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise ModelConfigError(f"{config_file}:{err.lineno}: malformed JSON: {err.msg}") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ModelConfigError(f"{config_file}: model_type: missing; mlx-lm needs it to load")
    try:
        mlx_lm_classes(config)
    except ValueError:
        raise ModelConfigError(
            f"{config_file}: model_type: {config['model_type']!r} is not an architecture "
            f"mlx-lm {mlx_lm_version()} can load"
        ) from None
    if not list(path.glob("model*.safetensors")):
        raise ModelConfigError(f"{path}: no model*.safetensors weight files")
    return config


def text_config(config: ConfigView) -> ModelConfig:
    """The decoder's config: the checkpoint's own, or its text_config when it is a multimodal
    gemma4."""
    if config.get("model_type") == "gemma4":
        return {**config.get("text_config", {}), "model_type": "gemma4_text"}
    return dict(config)


class _MultimodalShell(nn.Module):
    """Holds the decoder where a multimodal gemma4 checkpoint keeps it, so mlx-lm's loader can fill
    it."""

    def __init__(self, args: reference_multimodal.ModelArgs):
        super().__init__()
        self.language_model = Model(ModelArgs.from_dict(args.text_config))

    def sanitize(self, weights: dict[str, mx.array]) -> dict[str, mx.array]:
        return reference_multimodal.Model.sanitize(self, weights)


def _model_classes(config: ConfigView) -> tuple[type, type]:
    if config["model_type"] == "gemma4":
        return _MultimodalShell, reference_multimodal.ModelArgs
    return Model, ModelArgs


def mlx_lm_version() -> str:
    return version("mlx-lm")


def _load_checkpoint(path: Path, overrides: Overrides, implementation: str | None) -> AnyModel:
    config = read_checkpoint_config(path)
    layers = text_config(config).get("num_hidden_layers", 0)
    if overrides.layers not in (None, layers):
        raise ModelConfigError(
            f"{path}: layers={overrides.layers} applies to "
            f"presets only; this checkpoint has {layers} layers"
        )
    overrides.validate(layers)
    model = (
        _load_own_decoder(path, config)
        if runs_own_decoder(config, implementation)
        else SwitchedModel(_load_weights(path), config)
    )
    if overrides.dtype:
        cast_weights(model, MX_DTYPES[overrides.dtype])
    if overrides.quantize and "quantization" not in model.config:
        quantize_weights(model, overrides.quantize)
    return model


def _load_weights(path: Path, **classes: Any) -> nn.Module:
    try:
        return mlx_lm_load_model(path, **classes)[0]
    except (ValueError, KeyError) as err:
        raise ModelConfigError(f"{path}: weights do not match config.json: {err}") from None


def _load_own_decoder(path: Path, config: ModelConfig) -> Model:
    loaded = _load_weights(path, get_model_classes=_model_classes)
    model = loaded.language_model if isinstance(loaded, _MultimodalShell) else loaded
    model._config = text_config(config)
    return model


def save_checkpoint(model: Model, path: str | Path) -> Path:
    """Write an mlx-lm checkpoint directory (config.json + safetensors) that mlx-lm's gemma4_text
    loads too."""
    path = Path(path)
    save_model(path, model)
    save_config(dict(model.config), path / "config.json")
    return path


def parameter_bytes(config: ConfigView, dtype: str = "float32", quantize: str | None = None) -> int:
    """The model's weight bytes, from shapes alone: the lazy model is built but never
    materialized."""
    model = build_model(config)
    cast_weights(model, MX_DTYPES[dtype])
    if quantize:
        quantize_weights(model, quantize)
    return sum(v.nbytes for _, v in tree_flatten(_module(model).parameters()))
