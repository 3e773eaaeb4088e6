"""Before anything loads: the ops an experiment switches are ops its models call.

An op the variants switch that a model never calls (swiglu on Gemma 4, geglu on Qwen3) would time
two identical variants and call it a comparison; it is bad input, named with the ops the model does
call. The model is built lazily and traced for one token: nothing is computed or allocated.
"""

from __future__ import annotations

import mlx.core as mx

from fusebench.models.errors import UnknownOpError
from fusebench.models.loading import build_model
from fusebench.models.switched import check_switched_ops

from ...core.experiment import Experiment, ModelSpec
from ..machine.memory import model_config


def check_ops_called(spec: ModelSpec, exp: Experiment) -> None:
    model = build_model(model_config(spec), spec.implementation)
    try:
        check_switched_ops(model, exp.variants, mx.array([[0]]))
    except UnknownOpError as err:
        raise UnknownOpError(f"{exp.file}: variants: {spec.label}: {err}") from None
