"""An op is declared once: a toy op declared in this file alone (two variants, its calls and FLOPs)
is planned and timed by `fusebench ops`, probed by `fusebench kernels`, switched by the model's op
table, with nothing else touched.
"""

from __future__ import annotations

import math

import mlx.core as mx
import pytest
from mlx_lm.models.gemma4_text import ModelArgs

from fusebench.core.spec import parse_experiment
from fusebench.measure.ops.kernels import kernel_facts
from fusebench.measure.ops.opbench import bench_case, check_ops, experiment_plan
from fusebench.models.config import Overrides, preset_config
from fusebench.models.ops import (
    REGISTRY,
    OpCalls,
    OpCase,
    OpTable,
    declare,
    register,
    register_calls,
)

L = 16
HIDDEN = 64  # the tiny preset's


@pytest.fixture
def scale2():
    """The toy op, declared as a built-in op or a plugin's is, and gone afterwards."""
    declare("scale2", "x * 2 on the hidden state", reference="plain", default="plain")

    @register("scale2", "plain")
    def plain(x: mx.array) -> mx.array:
        return x * 2

    register("scale2", "compiled")(mx.compile(plain, shapeless=True))

    @register_calls("scale2")
    class Scale2Calls(OpCalls):
        def cases(self, args: ModelArgs, batch: int, length: int) -> list[OpCase]:
            return [OpCase("scale2", "hidden", ((batch, length, args.hidden_size),))]

        def flops(self, case: OpCase) -> int:
            return math.prod(case.shape)

    yield "scale2"
    del REGISTRY["scale2"]


def tiny_plan():
    return experiment_plan(
        parse_experiment(
            "name: ops\nmodels: [{preset: tiny}]\nvariants: {a: {}}\n"
            f"workloads: {{prompt_tokens: {L}, gen_tokens: 2}}\n"
        )
    )


def test_ops_plans_its_cases_after_the_built_in_ones(scale2):
    cases = tiny_plan().cases()
    assert [c.label for c in cases if c.op == scale2] == [f"tiny hidden [1,{L},{HIDDEN}]"]
    assert cases[-1].op == scale2
    assert check_ops([scale2]) == [scale2]
    assert [c.op for c in tiny_plan().cases([scale2])] == [scale2]


def test_its_variants_time_and_match_the_reference(scale2):
    [case] = tiny_plan().cases([scale2])
    records = []
    bench_case("run1", case, 1, records.append, min_sample_s=1e-4)
    assert sorted(r.variant for r in records) == ["compiled", "plain"]
    for record in records:
        assert record.reference == "plain" and record.max_abs_err == 0.0
        # x read, the output written
        assert record.flops == L * HIDDEN and record.bytes == 2 * L * HIDDEN * 4


def test_kernels_probe_its_variants_at_its_own_calls(scale2):
    facts = kernel_facts(
        ModelArgs.from_dict(preset_config("tiny", Overrides(layers=2))), prompt_tokens=L
    )
    mine = {f.variant: f for f in facts if f.op == scale2}
    assert set(mine) == {"plain", "compiled"}
    # one token, as the default probes
    assert {f.shape_label for f in mine.values()} == {f"hidden [1,1,{HIDDEN}]"}
    assert all(f.status != "error" and f.kernels for f in mine.values())


def test_the_model_op_table_switches_it(scale2):
    x = mx.ones((2,))
    assert OpTable().scale2 is REGISTRY[scale2].variants["plain"]
    assert mx.array_equal(OpTable({scale2: "compiled"}).scale2(x), x * 2).item()
