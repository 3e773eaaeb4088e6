"""The Gemma 4 model family and its switchable op variants. Nothing in here knows about timing.

The names below load lazily (PEP 562): `fusebench.models.config` and `fusebench.models.errors` are
plain data and errors, and a command that only reads results imports them without paying for mlx,
which the model and the ops need.
"""

from importlib import import_module
from typing import Any

_HOME = {
    "DTYPES": "config",
    "QUANTIZE_MODES": "config",
    "Overrides": "config",
    "preset_names": "config",
    "ModelConfigError": "errors",
    "ModelInputError": "errors",
    "UnknownOpError": "errors",
    "Model": "gemma4",
    "build_model": "loading",
    "load_model": "loading",
    "parameter_bytes": "loading",
    "save_checkpoint": "loading",
    "REGISTRY": "ops",
    "OpTable": "ops",
    "register": "ops",
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'models' has no attribute {name!r}")
    return getattr(import_module(f".{_HOME[name]}", __name__), name)
