"""Pin bench.spec: a valid experiment's values and defaults, matrix expansion, sharding, every
user-facing error."""

from __future__ import annotations

import hashlib
import pickle

import pytest

from fusebench.core.errors import SpecError
from fusebench.core.experiment import (
    Cell,
    Comparison,
    Correctness,
    Expectation,
    ModelSpec,
    Trials,
    Workload,
    resolve_ops,
)
from fusebench.core.flags import select_models, shard_cells, with_trials
from fusebench.core.spec import KEYS, TOP_KEYS, load_experiment, parse_experiment, schema_text
from fusebench.models.ops import REGISTRY, op_choices

# The line numbers in the error tests below count lines of this document.
MINIMAL = """\
name: t
models:
  - preset: tiny
variants:
  a: {}
  b: {geglu: compiled}
workloads:
  prompt_tokens: 16
  gen_tokens: 4
"""

FULL = """\
name: full-1.0
description: "every key given"
models:
  - preset: e2b
    size: E2B-2L
    layers: 2
    dtype: bfloat16
    quantize: nvfp4
  - preset: tiny
variants:
  baseline: {geglu: unfused, softcap: unfused, attention: manual}
  compiled: {geglu: compiled, softcap: compiled, attention: manual}
  sdpa: {attention: sdpa}
comparisons:
  - [baseline, compiled]
  - {baseline: baseline, new: sdpa}
  - [baseline, baseline]
workloads:
  prompt_tokens: [128, 512]
  gen_tokens: [16]
  batch: [1, 2]
depths: [512, 2048]
trials: 7
warmup: 2
prefill_step_size: 512
seed: 3
timeout_s: 900
correctness:
  reference: compiled
  atol: 0.05
  tokens: 4
expect:
  - {comparison: [baseline, compiled], metric: prefill, max_slowdown_pct: 5}
  - {comparison: {baseline: baseline, new: sdpa}, metric: gen, max_slowdown_pct: 2.5}
  - {all_correct: true}
"""


def replaced(old: str, new: str) -> str:
    assert old in MINIMAL
    return MINIMAL.replace(old, new)


def spec_error(text: str) -> SpecError:
    """The error of parsing `text` and then binding its op names to the registry, as `fusebench run`
    does."""
    with pytest.raises(SpecError) as info:
        resolve_ops(parse_experiment(text, "x.yaml"), op_choices())
    return info.value


def assert_error(err: SpecError, line: int, field: str, *fragments: str) -> None:
    text = str(err)
    assert text.startswith(f"x.yaml:{line}: {field}: "), text
    assert "\n" not in text
    assert (err.file, err.line, err.field) == ("x.yaml", line, field)
    for fragment in fragments:
        assert fragment in text, text


# --- valid experiments ----------------------------------------------------------------------------


def test_full_experiment_values():
    exp = parse_experiment(FULL, "full.yaml")
    assert (exp.name, exp.description, exp.file, exp.content) == (
        "full-1.0",
        "every key given",
        "full.yaml",
        FULL,
    )
    assert exp.sha256 == hashlib.sha256(FULL.encode()).hexdigest()
    assert exp.models == (
        ModelSpec(
            preset="e2b", path=None, size="E2B-2L", layers=2, dtype="bfloat16", quantize="nvfp4"
        ),
        ModelSpec(
            preset="tiny", path=None, size="tiny", layers=None, dtype="float32", quantize=None
        ),
    )
    assert list(exp.variants) == ["baseline", "compiled", "sdpa"]
    assert exp.comparisons == (
        Comparison("baseline", "compiled"),
        Comparison("baseline", "sdpa"),
        Comparison("baseline", "baseline"),
    )
    assert exp.depths == (512, 2048)
    assert (exp.rounds, exp.warmup, exp.prefill_step_size, exp.seed) == (7, 2, 512, 3)
    assert exp.timeout_s == 900.0 and isinstance(exp.timeout_s, float)
    assert exp.correctness == Correctness(reference="compiled", atol=0.05, tokens=4)
    assert exp.expect == (
        Expectation("slowdown", Comparison("baseline", "compiled"), "prefill", 5.0),
        Expectation("slowdown", Comparison("baseline", "sdpa"), "gen", 2.5),
        Expectation("all_correct"),
    )


def test_defaults():
    exp = parse_experiment(MINIMAL)
    assert exp.file == "<string>" and exp.description == ""
    assert exp.models == (ModelSpec("tiny", None, "tiny", None, "float32", None),)
    assert exp.workloads == (Workload(16, 4, 1),)
    assert (exp.comparisons, exp.depths, exp.expect) == ((), (), ())
    assert (exp.rounds, exp.warmup, exp.prefill_step_size, exp.seed, exp.timeout_s) == (
        5,
        1,
        2048,
        0,
        1800.0,
    )
    assert exp.correctness == Correctness(reference="a", atol=None, tokens=8)


def test_empty_optional_keys_take_defaults():
    exp = parse_experiment(MINIMAL + "trials:\ncomparisons:\ncorrectness:\n")
    assert (exp.trials, exp.rounds, exp.comparisons) == (Trials.FIXED, 5, ())
    assert exp.correctness.reference == "a"
    exp = parse_experiment(replaced("preset: tiny", "{preset: tiny, quantize: none, layers: }"))
    assert (exp.models[0].quantize, exp.models[0].layers) == (None, None)


def test_variants_are_completed_with_defaults():
    exp = parse_experiment(MINIMAL)
    assert exp.variants["b"] == {"geglu": "compiled"}  # as written, until bound to the registry
    exp = resolve_ops(exp, op_choices())
    defaults = {op: spec.default for op, spec in REGISTRY.items()}
    assert exp.variants["a"] == defaults
    assert exp.variants["b"] == {**defaults, "geglu": "compiled"}
    assert list(exp.variants["b"]) == list(REGISTRY)


def test_matrix_expansion_order():
    exp = parse_experiment(FULL)
    cells = exp.cells()
    labels = ["pp128 tg16 b1", "pp128 tg16 b2", "pp512 tg16 b1", "pp512 tg16 b2"]
    assert [cell.workload.label for cell in cells] == labels * 2
    assert len(cells) == 8
    assert [cell.model.preset for cell in cells] == ["e2b"] * 4 + ["tiny"] * 4
    assert cells[0] == Cell(exp.models[0], Workload(128, 16, 1))
    assert cells[0].key == "e2b:layers=2:bfloat16:nvfp4|pp128 tg16 b1"
    assert cells[-1].key == "tiny:layers=all:float32:none|pp512 tg16 b2"
    assert len({cell.key for cell in cells}) == 8


def test_trial_count():
    exp = parse_experiment(FULL)
    assert exp.trial_count() == 8 * 3 * (7 + 2)
    assert parse_experiment(MINIMAL).trial_count() == 1 * 2 * (5 + 1)


def test_single_ints_and_int_forms():
    exp = parse_experiment(replaced("prompt_tokens: 16", "prompt_tokens: 1_024") + "  batch: 0x2\n")
    assert exp.workloads == (Workload(1024, 4, 2),)


def test_load_experiment_reads_file(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_bytes(FULL.encode())
    exp = load_experiment(path)
    assert exp.file == str(path) and exp.content == FULL
    assert exp.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_list_of_depths_makes_a_model_of_each():
    exp = parse_experiment(
        replaced("preset: tiny", "{preset: e2b, layers: [2, 4, 35], size: E2B, dtype: bfloat16}")
    )
    assert exp.models == tuple(
        ModelSpec("e2b", None, "E2B", depth, "bfloat16", None) for depth in (2, 4, 35)
    )
    assert [m.label for m in exp.models] == ["E2B (2/35 layers)", "E2B (4/35 layers)", "E2B"]
    assert [cell.key for cell in exp.cells()] == [
        f"e2b:layers={d}:bfloat16:none|pp16 tg4 b1" for d in (2, 4, 35)
    ]
    assert select_models(exp, ["e2b"]).models == exp.models


def test_the_schema_names_every_key_in_the_order_the_parser_reads_them():
    schema = schema_text()
    keys = [line.split(":")[0] for line in schema.splitlines() if not line.startswith(" ")]
    assert tuple(keys) == TOP_KEYS == tuple(key.name for key in KEYS)
    assert TOP_KEYS[:4] == ("name", "description", "models", "variants")
    assert "layers: 2" in schema and "a model per depth" in schema


def test_a_model_is_a_preset_or_a_path():
    with pytest.raises(ValueError, match="exactly one"):
        ModelSpec("tiny", "/ckpt", "tiny", None, "float32", None)
    with pytest.raises(ValueError, match="exactly one"):
        ModelSpec(None, None, "x", None, "float32", None)


def test_path_model(tmp_path):
    ckpt = tmp_path / "my-ckpt"
    ckpt.mkdir()
    exp = parse_experiment(MINIMAL.replace("preset: tiny", f"{{path: '{ckpt}', dtype: float16}}"))
    model = exp.models[0]
    assert (model.preset, model.path, model.size, model.layers) == (
        None,
        str(ckpt),
        "my-ckpt",
        None,
    )
    assert model.source == str(ckpt) and model.key == f"{ckpt}:layers=all:float16:none"


# --- errors ---------------------------------------------------------------------------------------


ERRORS = {
    "unknown top-level key": (
        MINIMAL + "colour: red\n",
        10,
        "colour",
        "unknown key 'colour'",
        "valid keys: name, description, models, variants, comparisons, workloads, depths",
    ),
    "missing name": (replaced("name: t\n", ""), 1, "name", "required key is missing"),
    "name is a list": (
        replaced("name: t", "name: [t]"),
        1,
        "name",
        "expected a string, got a list",
    ),
    "name has a space": (replaced("name: t", "name: my exp"), 1, "name", "letters, digits"),
    "unknown model key": (
        replaced("preset: tiny", "preset: tiny\n    colour: red"),
        4,
        "models[0].colour",
        "valid keys: preset, path, repo, size, layers, dtype, quantize",
    ),
    "unknown preset": (
        replaced("preset: tiny", "preset: e3b"),
        3,
        "models[0].preset",
        "unknown preset 'e3b'; choose from 26b, 31b, e2b, e4b, gemma3-1b, llama3.2-1b, "
        "llama3.2-3b, mistral-7b, qwen3-0.6b, qwen3-30b-a3b, qwen3-4b, tiny, tiny-moe",
    ),
    "preset and path": (
        replaced("preset: tiny", "preset: tiny\n    path: /"),
        4,
        "models[0]",
        "give one of a preset, a path or a repo, not several",
    ),
    "not a repo id": (
        replaced("preset: tiny", "repo: no-slash"),
        3,
        "models[0].repo",
        "'no-slash' is not a repo id; give org/name[@revision]",
    ),
    "neither preset nor path": (
        replaced("preset: tiny", "size: x"),
        3,
        "models[0]",
        "give a preset (one of 26b,",
    ),
    "nonexistent path": (
        replaced("preset: tiny", "path: /nonexistent/fusebench-ckpt"),
        3,
        "models[0].path",
        "does not exist",
    ),
    "layers 0": (
        replaced("preset: tiny", "preset: tiny\n    layers: 0"),
        4,
        "models[0].layers",
        "choose 1..6",
    ),
    "layers too many": (
        replaced("preset: tiny", "preset: tiny\n    layers: 7"),
        4,
        "models[0].layers",
        "choose 1..6",
    ),
    "layers is a bool": (
        replaced("preset: tiny", "preset: tiny\n    layers: yes"),
        4,
        "models[0].layers",
        "expected an integer, got a boolean",
    ),
    "depth out of range": (
        replaced("preset: tiny", "preset: tiny\n    layers: [2,\n      7]"),
        5,
        "models[0].layers[1]",
        "7 is out of range; choose 1..6 (tiny has 6)",
    ),
    "empty depth list": (
        replaced("preset: tiny", "preset: tiny\n    layers: []"),
        4,
        "models[0].layers",
        "empty list",
    ),
    "repeated depth": (
        replaced("preset: tiny", "preset: tiny\n    layers: [2, 4, 2]"),
        4,
        "models[0].layers[2]",
        "duplicate value 2",
    ),
    "depth list with a path": (
        replaced("preset: tiny", "path: /\n    layers: [2, 4]"),
        4,
        "models[0].layers",
        "only for presets",
    ),
    "a depth listed by two models": (
        replaced("preset: tiny", "{preset: tiny, layers: [2, 4]}\n  - {preset: tiny, layers: 4}"),
        4,
        "models[1]",
        "same model as models[0]",
    ),
    "bad dtype": (
        replaced("preset: tiny", "preset: tiny\n    dtype: fp32"),
        4,
        "models[0].dtype",
        "unknown dtype 'fp32'; choose from float32, bfloat16, float16",
    ),
    "bad quantize": (
        replaced("preset: tiny", "preset: tiny\n    quantize: int4"),
        4,
        "models[0].quantize",
        "choose from none, affine4, affine8, mxfp4, mxfp8, nvfp4",
    ),
    "duplicate model": (
        replaced("preset: tiny", "preset: tiny\n  - {preset: tiny, size: other}"),
        4,
        "models[1]",
        "same model as models[0]",
    ),
    "empty models": (
        replaced("models:\n  - preset: tiny", "models: []"),
        2,
        "models",
        "at least one model",
    ),
    "models not a list": (
        replaced("models:\n  - preset: tiny", "models: tiny"),
        2,
        "models",
        "expected a list",
    ),
    "unknown op": (
        replaced("{geglu: compiled}", "{gelu: compiled}"),
        6,
        "variants.b.gelu",
        "unknown op 'gelu'; choose from geglu, softcap, attention, rms_norm, rope",
    ),
    "unknown variant": (
        replaced("{geglu: compiled}", "{geglu: fused}"),
        6,
        "variants.b.geglu",
        "unknown geglu variant 'fused'; choose from unfused, compiled",
    ),
    "duplicate variant": (
        replaced("  b: {", "  a: {"),
        6,
        "variants.a",
        "duplicate variant name 'a' (first defined on line 5)",
    ),
    "duplicate op": (
        replaced("{geglu: compiled}", "{geglu: compiled, geglu: unfused}"),
        6,
        "variants.b.geglu",
        "duplicate op 'geglu'",
    ),
    "empty variants": (
        replaced("variants:\n  a: {}\n  b: {geglu: compiled}", "variants: {}"),
        4,
        "variants",
        "no variants",
    ),
    "variant not a mapping": (
        replaced("b: {geglu: compiled}", "b: [geglu]"),
        6,
        "variants.b",
        "expected a mapping",
    ),
    "comparison to missing variant": (
        MINIMAL + "comparisons:\n  - [a, c]\n",
        11,
        "comparisons[0][1]",
        "unknown variant 'c'; choose from a, b",
    ),
    "comparison mapping to missing variant": (
        MINIMAL + "comparisons:\n  - {baseline: z, new: a}\n",
        11,
        "comparisons[0].baseline",
        "choose from a, b",
    ),
    "comparison mapping missing new": (
        MINIMAL + "comparisons:\n  - {baseline: a}\n",
        11,
        "comparisons[0].new",
        "required key is missing",
    ),
    "comparison of one": (
        MINIMAL + "comparisons:\n  - [a]\n",
        11,
        "comparisons[0]",
        "expected [baseline, new]",
    ),
    "trials is a string": (
        MINIMAL + "trials: five\n",
        10,
        "trials",
        "expected a number of rounds (>= 1) or one of auto, budget, plan, got a string ('five')",
    ),
    "trials: plan without a budget": (
        MINIMAL + "trials: plan\n",
        10,
        "trials",
        "trials: plan needs budget_s (the most its rounds may take)",
    ),
    "trials: plan with fewer max_rounds than a planned cell's least": (
        MINIMAL + "trials: plan\nbudget_s: 300\nmax_rounds: 6\n",
        12,
        "max_rounds",
        "with trials: plan, at least 8 (a planned cell's fewest rounds)",
    ),
    "trials: budget without a budget": (
        MINIMAL + "trials: budget\n",
        10,
        "trials",
        "trials: budget needs budget_s",
    ),
    "trials: budget without a warm-up": (
        MINIMAL + "trials: budget\nbudget_s: 60\nwarmup: 0\n",
        10,
        "trials",
        "needs warmup >= 1",
    ),
    "trials: budget with a precision target": (
        MINIMAL + "trials: budget\nbudget_s: 60\nprecision: 2%\n",
        12,
        "precision",
        "only with trials: auto (trials: budget fixes its rounds, it adds none)",
    ),
    "precision beside fixed trials": (
        MINIMAL + "trials: 5\nprecision: 2%\n",
        11,
        "precision",
        "only with trials: auto",
    ),
    "precision out of range": (
        MINIMAL + "trials: auto\nprecision: 60%\n",
        11,
        "precision",
        "expected a percentage in (0%, 50%]",
    ),
    "precision of zero": (MINIMAL + "trials: auto\nprecision: 0\n", 11, "precision", "(0%, 50%]"),
    "max_rounds too small": (
        MINIMAL + "trials: auto\nmax_rounds: 3\n",
        11,
        "max_rounds",
        "must be >= 6",
    ),
    "budget of zero": (MINIMAL + "trials: auto\nbudget_s: 0\n", 11, "budget_s", "must be > 0"),
    "threads below one": (MINIMAL + "threads: 0\n", 10, "threads", "must be >= 1"),
    "worker_rounds a word": (
        MINIMAL + "worker_rounds: often\n",
        10,
        "worker_rounds",
        "expected an integer >= 0 or auto, got 'often'",
    ),
    "worker_rounds negative": (MINIMAL + "worker_rounds: -1\n", 10, "worker_rounds", ">= 0"),
    "threads above the cores": (MINIMAL + "threads: 4096\n", 10, "threads", "choose 1.."),
    "negative margin": (MINIMAL + "margin_pct: -1\n", 10, "margin_pct", "must be >= 0"),
    "trials is a bool": (
        MINIMAL + "trials: true\n",
        10,
        "trials",
        "expected an integer, got a boolean",
    ),
    "warmup is a float": (
        MINIMAL + "warmup: 1.0\n",
        10,
        "warmup",
        "expected an integer, got a float",
    ),
    "trials zero": (MINIMAL + "trials: 0\n", 10, "trials", "must be >= 1, got 0"),
    "warmup negative": (MINIMAL + "warmup: -1\n", 10, "warmup", "must be >= 0, got -1"),
    "prefill_step_size zero": (
        MINIMAL + "prefill_step_size: 0\n",
        10,
        "prefill_step_size",
        "must be >= 1",
    ),
    "timeout zero": (MINIMAL + "timeout_s: 0\n", 10, "timeout_s", "must be > 0"),
    "timeout a string": (MINIMAL + "timeout_s: soon\n", 10, "timeout_s", "expected a number"),
    "depth zero": (MINIMAL + "depths: [512, 0]\n", 10, "depths[1]", "must be >= 1"),
    "shares negative": (MINIMAL + "shares: -1\n", 10, "shares", "must be >= 0, got -1"),
    "prompt_tokens zero": (
        replaced("prompt_tokens: 16", "prompt_tokens: 0"),
        8,
        "workloads.prompt_tokens",
        "must be >= 1",
    ),
    "gen_tokens zero in list": (
        replaced("gen_tokens: 4", "gen_tokens:\n    - 4\n    - 0"),
        11,
        "workloads.gen_tokens[1]",
        "must be >= 1",
    ),
    "batch zero": (MINIMAL + "  batch: 0\n", 10, "workloads.batch", "must be >= 1"),
    "duplicate workload value": (
        replaced("prompt_tokens: 16", "prompt_tokens: [16, 16]"),
        8,
        "workloads.prompt_tokens[1]",
        "duplicate value 16",
    ),
    "workloads missing prompt_tokens": (
        replaced("  prompt_tokens: 16\n", ""),
        8,
        "workloads.prompt_tokens",
        "required key is missing",
    ),
    "empty workload list": (
        replaced("prompt_tokens: 16", "prompt_tokens: []"),
        8,
        "workloads.prompt_tokens",
        "empty list",
    ),
    "unknown workload key": (
        MINIMAL + "  tokens: 3\n",
        10,
        "workloads.tokens",
        "valid keys: prompt_tokens, gen_tokens, batch",
    ),
    "unknown correctness reference": (
        MINIMAL + "correctness:\n  reference: c\n",
        11,
        "correctness.reference",
        "choose from a, b",
    ),
    "negative atol": (
        MINIMAL + "correctness: {atol: -0.1}\n",
        10,
        "correctness.atol",
        "must be >= 0",
    ),
    "unknown correctness key": (
        MINIMAL + "correctness: {rtol: 1}\n",
        10,
        "correctness.rtol",
        "valid keys: reference, atol, tokens",
    ),
    "expect unknown metric": (
        MINIMAL + "expect:\n  - {comparison: [a, b], metric: decode, max_slowdown_pct: 5}\n",
        11,
        "expect[0].metric",
        "unknown metric 'decode'; choose from prefill, gen",
    ),
    "expect missing variant": (
        MINIMAL + "expect:\n  - {comparison: [a, z], metric: gen, max_slowdown_pct: 5}\n",
        11,
        "expect[0].comparison[1]",
        "choose from a, b",
    ),
    "expect negative slowdown": (
        MINIMAL + "expect:\n  - {comparison: [a, b], metric: gen, max_slowdown_pct: -1}\n",
        11,
        "expect[0].max_slowdown_pct",
        "must be >= 0",
    ),
    "expect unknown key": (
        MINIMAL + "expect:\n  - {al_correct: true}\n",
        11,
        "expect[0].al_correct",
        "valid keys: comparison, metric, max_slowdown_pct, all_correct",
    ),
    "expect all_correct false": (
        MINIMAL + "expect:\n  - {all_correct: false}\n",
        11,
        "expect[0].all_correct",
        "expected true",
    ),
    "expect all_correct mixed": (
        MINIMAL + "expect:\n  - {all_correct: true, metric: gen}\n",
        11,
        "expect[0].metric",
        "stands alone",
    ),
    "yaml syntax error": (
        replaced("  b: {geglu: compiled}", "  b: x: y"),
        6,
        "yaml",
        "mapping values are not allowed",
    ),
    "unclosed bracket": (
        replaced("prompt_tokens: 16", "prompt_tokens: [16"),
        9,
        "yaml",
        "on line 8",
    ),
    "empty file": ("", 1, "experiment", "empty"),
    "only comments": ("# nothing yet\n", 1, "experiment", "empty"),
    "top level is a list": ("- name: t\n", 1, "experiment", "expected a mapping", "got a list"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors(case):
    text, line, field, *fragments = ERRORS[case]
    assert_error(spec_error(text), line, field, *fragments)


def test_first_error_is_reported():
    text = replaced("preset: tiny", "preset: e3b") + "trials: 0\n"
    assert_error(spec_error(text), 3, "models[0].preset", "e3b")


def test_path_that_is_a_file(tmp_path):
    file = tmp_path / "weights.safetensors"
    file.write_text("")
    err = spec_error(replaced("preset: tiny", f"path: '{file}'"))
    assert_error(err, 3, "models[0].path", "is not a directory")


def test_layers_with_path(tmp_path):
    err = spec_error(replaced("preset: tiny", f"path: '{tmp_path}'\n    layers: 2"))
    assert_error(err, 4, "models[0].layers", "only for presets")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as info:
        load_experiment(path)
    assert str(info.value).startswith(f"{path}:0: file: no such file, nor a shipped experiment")


def test_load_reports_file_name_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(MINIMAL + "trials: 1.5\n")
    with pytest.raises(SpecError) as info:
        load_experiment(path)
    assert str(info.value).startswith(f"{path}:10: trials: expected an integer, got a float (1.5)")


def test_spec_error_is_a_value_error():
    assert issubclass(SpecError, ValueError)
    err = SpecError("f.yaml", 3, "trials", "bad\nthing")
    assert str(err) == "f.yaml:3: trials: bad thing"
    assert err.message == "bad thing"
    copy = pickle.loads(pickle.dumps(err))
    assert (str(copy), copy.line, copy.field) == (str(err), 3, "trials")


# --- sharding -------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_shards_partition_the_cells(count):
    cells = parse_experiment(FULL).cells()  # 8 cells
    shards = [shard_cells(cells, index, count) for index in range(1, count + 1)]
    keys = [cell.key for shard in shards for cell in shard]
    assert sorted(keys) == sorted(cell.key for cell in cells)
    assert len(keys) == len(set(keys))
    assert shards == [shard_cells(cells, index, count) for index in range(1, count + 1)]
    assert shards[0][0] == cells[0]


def test_shard_out_of_range():
    with pytest.raises(ValueError, match="1 <= I <= N"):
        shard_cells([], 0, 2)
    with pytest.raises(ValueError, match="1 <= I <= N"):
        shard_cells([], 3, 2)


def test_stored_experiment_does_not_look_for_checkpoints():
    text = replaced("preset: tiny", "path: /no/such/checkpoint")
    assert parse_experiment(text, stored=True).models[0].path == "/no/such/checkpoint"
    assert_error(spec_error(text), 3, "models[0].path", "does not exist")


def test_plugins_are_relative_to_the_experiment(tmp_path):
    (tmp_path / "fusions.py").write_text("")
    path = tmp_path / "x.yaml"
    path.write_text(MINIMAL + "plugins: [fusions.py]\n")
    assert load_experiment(path).plugins == (str((tmp_path / "fusions.py").resolve()),)
    path.write_text(MINIMAL + "plugins: [missing.py]\n")
    with pytest.raises(SpecError, match=r"x.yaml:10: plugins\[0\]: .*missing.py' is not a file"):
        load_experiment(path)


def test_explicit_trials_mean_exactly_that_many_rounds():
    # run --trials 3 on a trials: auto experiment: 3 rounds, not "at least 6, at most 3".
    auto = parse_experiment(MINIMAL + "trials: auto\nprecision: 3%\n")
    assert (auto.trials, auto.target_pct) == (Trials.AUTO, 3.0)
    fixed = with_trials(auto, 3)
    assert (fixed.trials, fixed.rounds, fixed.target_pct) == (Trials.FIXED, 3, None)
    assert fixed.sha256 == auto.sha256  # still the same file, so --resume keeps working


def test_trials_budget_fixes_its_rounds_so_its_intervals_are_fixed_n():
    budget = parse_experiment(MINIMAL + "trials: budget\nbudget_s: 90\nmax_rounds: 40\n")
    assert (budget.trials, budget.rounds, budget.budget_s, budget.target_pct) == (
        Trials.BUDGET,
        40,
        90.0,
        None,
    )
    assert not budget.trials.adaptive
    assert parse_experiment(MINIMAL + "trials: auto\n").trials.adaptive
    assert not parse_experiment(MINIMAL + "trials: 5\n").trials.adaptive
