"""The Gemma 4 model family and its switchable op variants. Nothing in here knows about timing."""

from .config import DTYPES, QUANTIZE_MODES, ModelConfigError, Overrides, preset_names
from .gemma4 import Model
from .loading import build_model, load_model, parameter_bytes, save_checkpoint
from .ops import REGISTRY, OpTable, UnknownOpError, register

__all__ = [
    "DTYPES",
    "QUANTIZE_MODES",
    "REGISTRY",
    "Model",
    "ModelConfigError",
    "OpTable",
    "Overrides",
    "UnknownOpError",
    "build_model",
    "load_model",
    "parameter_bytes",
    "preset_names",
    "register",
    "save_checkpoint",
]
