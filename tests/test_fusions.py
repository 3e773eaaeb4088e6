"""`fusebench fusions`: the chains found in a traced step (on hand-made graphs), the replay of real
models' steps against their own calls, and the command's answers and input errors."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, fusebench

from fusebench.analysis.fusions import (
    COMPILED,
    EAGER,
    FUSION_OP,
    FusionEstimate,
    Where,
    compiled_by_model,
    estimates,
    fusible_chains,
    fusible_groups,
    module_groups,
    shape_label,
    where,
)
from fusebench.core.fileformat import OpRecord
from fusebench.core.fusion import FusionRecord, Primitive, StepGraph, StepRecord, Tensor

FUSIBLE = frozenset({"Add", "Multiply", "Divide", "Tanh", "Broadcast", "AsType"})
ROWS = (1, 8, 16)


def t(name: str, shape: tuple[int, ...] = ROWS, dtype: str = "float32") -> Tensor:
    return Tensor(name, shape, dtype)


def p(name: str, inputs: list[Tensor], out: Tensor, *arguments: object) -> Primitive:
    return Primitive(name, tuple(arguments), tuple(inputs), (out,))


def softcap(prefix: str, x: Tensor, cap: Tensor, shape: tuple[int, ...] = ROWS) -> list[Primitive]:
    """tanh(x / cap) * cap, the broadcast of the constant cap shared by both ends, as MLX traces."""
    wide = t(f"{prefix}b", shape)
    scaled, bent, out = t(f"{prefix}d", shape), t(f"{prefix}t", shape), t(f"{prefix}o", shape)
    return [
        p("Broadcast", [cap], wide, shape),
        p("Divide", [x, wide], scaled),
        p("Tanh", [scaled], bent),
        p("Multiply", [bent, wide], out),
    ]


def graph(prims: list[Primitive], outputs: list[str], call: str = "decode") -> StepGraph:
    made = {o.name for q in prims for o in q.outputs}
    sources = {i for q in prims for i in q.inputs if i.name not in made}
    return StepGraph(call, tuple(sources), tuple(outputs), tuple(prims))


def test_a_chain_between_matmuls_is_one_group_and_saves_its_intermediates() -> None:
    weight, x, cap = t("w", (16, 16)), t("x"), t("cap", ())
    logits = t("m")
    prims = [p("Matmul", [x, weight], logits), *softcap("s", logits, cap)]
    (group,) = fusible_groups(graph(prims, ["so"]), FUSIBLE)
    assert group.chain == "Divide -> Tanh -> Multiply"
    assert {i.name for i in group.inputs} == {"m", "cap"}
    assert [o.name for o in group.outputs] == ["so"]
    # the divide's and the tanh's outputs: one write and one read each; the broadcast is a view
    assert group.bytes_saved == 2 * 2 * logits.nbytes


def test_a_shared_constant_does_not_tie_two_chains_together() -> None:
    cap = t("cap", ())
    prims = softcap("a", t("x"), cap) + softcap("b", t("y"), cap)
    groups = fusible_groups(graph(prims, ["ao", "bo"]), FUSIBLE)
    assert [g.chain for g in groups] == ["Divide -> Tanh -> Multiply"] * 2


def test_one_fusible_primitive_alone_is_no_candidate() -> None:
    prims = [p("Tanh", [t("x")], t("y")), p("Matmul", [t("y"), t("w", (16, 16))], t("z"))]
    assert fusible_groups(graph(prims, ["z"]), FUSIBLE) == []


def test_an_array_read_outside_the_group_is_an_output_not_an_intermediate() -> None:
    x, y, z, w = t("x"), t("y"), t("z"), t("w", (16, 16))
    prims = [
        p("Tanh", [x], y),
        p("Multiply", [y, x], z),
        p("Matmul", [y, w], t("k")),  # reads the tanh's output too: it must be written
    ]
    (group,) = fusible_groups(graph(prims, ["z", "k"]), FUSIBLE)
    assert {o.name for o in group.outputs} == {"y", "z"}
    assert group.intermediates == ()
    assert group.bytes_saved == 0


def test_identical_chains_are_counted_per_phase_and_other_shapes_kept_apart() -> None:
    cap = t("cap", ())
    two_layers = graph(softcap("a", t("x"), cap) + softcap("b", t("y"), cap), ["ao", "bo"])
    longer = (1, 127, 16)
    prefill = graph(softcap("c", t("z", longer), cap, longer), ["co"], "prefill")
    found = fusible_chains({"prefill": [prefill, two_layers], "decode": [two_layers]}, FUSIBLE)
    assert [c.calls for c in found] == [{"prefill": 1}, {"prefill": 2, "decode": 2}]


def test_the_same_chain_visited_in_another_order_is_the_same_candidate() -> None:
    cap = t("cap", ())
    first = softcap("a", t("x"), cap)
    shuffled = softcap("b", t("y"), cap)
    shuffled = [shuffled[0], shuffled[1], shuffled[2], shuffled[3]][::-1]  # the trace's own order
    found = fusible_chains({"decode": [graph(first + shuffled, ["ao", "bo"])]}, FUSIBLE)
    assert [c.calls for c in found] == [{"decode": 2}]


def test_a_chain_comes_from_the_deepest_module_that_holds_it_layer_indices_read_as_star() -> None:
    cap = t("cap", ())
    step = graph(softcap("a", t("x"), cap), ["ao"])
    layer = graph(softcap("a", t("x"), cap), ["ao"], "model.layers.3 (DecoderLayer)")
    mlp = graph(softcap("a", t("x"), cap), ["ao"], "model.layers.3.mlp (MLP)")
    mlp = StepGraph(mlp.call, mlp.sources, mlp.outputs, mlp.primitives, "mlx_lm.models.x.MLP")
    norm = graph([p("Tanh", [t("x")], t("y"))], ["y"], "model.layers.3.norm (RMSNorm)")
    (candidate,) = fusible_chains({"decode": [step]}, FUSIBLE)
    modules = module_groups([layer, mlp, norm], FUSIBLE)
    assert where(candidate, modules) == Where("MLP (model.layers.*.mlp)", "mlx_lm.models.x.MLP")
    assert where(candidate, module_groups([norm], FUSIBLE)).text == "spans modules"


def test_a_chain_the_model_compiles_itself_is_marked() -> None:
    cap = t("cap", ())
    (group,) = fusible_groups(graph(softcap("a", t("x"), cap), ["ao"]), FUSIBLE)
    names = ["Broadcast", "Divide", "Tanh", "Multiply", "LogAddExp", "Add"]
    assert compiled_by_model(group, ["BroadcastDivideTanhBroadcastMultiply"], names) == "whole"
    assert compiled_by_model(group, ["TanhMultiply"], names) == "part"
    assert compiled_by_model(group, ["LogAddExpAdd", "Tanh"], names) == "no"


def record(candidate: str, calls: dict[str, int]) -> FusionRecord:
    return FusionRecord(
        run_id="r",
        model="E2B",
        candidate=candidate,
        chain="Divide -> Tanh -> Multiply",
        where="Model",
        origin="",
        op="",
        calls=calls,
        shapes="[1,8,16]",
        bytes_saved=1024,
        compiled_by_model="no",
        kernels=1,
        max_abs_err=0.0,
        inputs_from="step",
    )


def sample(rec: FusionRecord, variant: str, round_index: int, seconds: float) -> OpRecord:
    return OpRecord(
        run_id="r",
        op=FUSION_OP,
        variant=variant,
        reference=EAGER,
        shape_label=shape_label(rec),
        round=round_index,
        seconds=seconds,
        bytes=1,
        flops=None,
        max_abs_err=0.0,
    )


def test_the_expected_delta_is_the_time_saved_times_the_count_over_the_step() -> None:
    from fusebench.analysis.opstats import summarize_ops

    saves, costs = record("c1", {"prefill": 2, "decode": 1}), record("c2", {"decode": 4})
    samples = []
    for r in range(6):
        jitter = 1e-4 * (r % 3)
        samples += [sample(saves, EAGER, r, 0.010 + jitter), sample(saves, COMPILED, r, 0.005)]
        samples += [sample(costs, EAGER, r, 0.001), sample(costs, COMPILED, r, 0.002 + jitter)]
    steps = [
        StepRecord(run_id="r", model="E2B", phase=phase, round=r, seconds=seconds)
        for r in range(6)
        for phase, seconds in (("prefill", 1.0), ("decode", 0.1))
    ]
    found = estimates([saves, costs], samples, steps, summarize_ops(samples))
    by_name = {e.record.candidate: e for e in found}
    # two calls saving ~5.1 ms of a 1 s prefill: about +1%; one of a 100 ms decode step: about +5%
    assert by_name["c1"].expected["prefill"].delta_pct == pytest.approx(100 / 0.9898 - 100, 0.05)
    assert by_name["c1"].expected["gen"].delta_pct > 4.5
    assert by_name["c1"].share_pct["prefill"] == pytest.approx(2 * 1.01, rel=0.02)
    assert "prefill" not in by_name["c2"].expected
    assert by_name["c2"].expected["gen"].delta_pct < -3
    # ranked by the size of the effect, either way
    assert [e.record.candidate for e in found] == ["c1", "c2"]
    low, high = by_name["c1"].expected["gen"].low_pct, by_name["c1"].expected["gen"].high_pct
    assert low < by_name["c1"].expected["gen"].delta_pct < high


# --- on real models ---------------------------------------------------------------------------


@pytest.mark.parametrize(("preset", "layers"), [("tiny", 6), ("llama3.2-1b", 2)])
def test_each_call_of_the_step_replayed_from_its_trace_computes_what_the_model_does(
    preset: str, layers: int
) -> None:
    import mlx.core as mx

    from fusebench.measure.fusions.replay import missing, replay
    from fusebench.measure.fusions.trace import step_calls
    from fusebench.models.loading import load_model

    model = load_model(preset, layers=layers, dtype="float32")
    prompt = mx.random.randint(0, 500, (1, 12), key=mx.random.key(0))
    calls = step_calls(model, prompt, step=8)  # two prefill chunks, the last token, one decode
    assert [len(c) for c in calls.values()] == [3, 1]
    for call in [c for phase in calls.values() for c in phase]:
        assert missing(call.graph.primitives) == ()
        outputs, _ = replay(call.graph, call.sources, set())
        for ours, theirs in zip(outputs, call.own_outputs, strict=True):
            assert mx.array_equal(ours, theirs).item()


def test_the_probe_reads_what_mx_compile_fuses_here() -> None:
    from fusebench.measure.fusions.probe import fusible
    from fusebench.measure.machine.env import compile_fuses

    mul = p("Multiply", [t("x"), t("y")], t("z"))
    matmul = p("Matmul", [t("x"), t("w", (16, 16))], t("m"))
    found = fusible([mul, matmul])
    assert "Matmul" not in found
    assert ("Multiply" in found) == compile_fuses()


needs_compiler = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None, reason="no C++ compiler here"
)


@needs_compiler
def test_fusions_ranks_the_chains_of_a_preset_as_json(tmp_path: Path) -> None:
    out = tmp_path / "f.jsonl"
    plugin = ROOT / "examples" / "plugins" / "fast_softcap.py"
    done = fusebench(
        "fusions",
        "tiny",
        "--plugin",
        str(plugin),
        "--layers",
        "6",
        "--rounds",
        "2",
        "--format",
        "json",
        "--out",
        str(out),
        "--threads",
        "1",
        "--shapeless",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    (answer,) = json.loads(done.stdout)
    assert all(c["shapeless"] for c in answer["candidates"])
    assert answer["model"].startswith("tiny")
    assert all(r["max_abs_err"] == 0 for r in answer["replays"])
    chains = {c["chain"] for c in answer["candidates"]}
    assert "Multiply -> Tanh -> Multiply" in chains  # the logit softcap
    softcap = next(c for c in answer["candidates"] if c["chain"] == "Multiply -> Tanh -> Multiply")
    assert softcap["calls"] == {"prefill": 1, "decode": 1}
    assert softcap["where"] == "Model" and softcap["op"] == "softcap"
    assert {c["op"] for c in answer["candidates"]} >= {"geglu", "softcap", "rope", "rms_norm"}
    assert set(softcap["expected"]) == {"prefill", "gen"}
    # every variant of the chains' ops at their calls, the plugin's beside the registry's
    variants = {(v["op"], v["variant"]) for v in answer["variants"]}
    assert {("softcap", "compiled"), ("softcap", "reciprocal"), ("geglu", "compiled")} <= variants
    kinds = {json.loads(line)["kind"] for line in out.read_text().splitlines()}
    assert kinds == {"run", "replay", "step", "fusion", "op", "variant"}
    # the records read back: the report's section, every chain ranked as the command ranked them
    from fusebench.analysis.study import build_study
    from fusebench.core.results import read_results
    from fusebench.present.report import write_report

    study = build_study(read_results([out]))
    assert [e.record.candidate for e in study.fusions] == [
        c["candidate"] for c in answer["candidates"]
    ]
    write_report(study, [], tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Which fusion to write" in text and "The chains' ops, each variant" in text
    assert "chain compiled with mx.compile(shapeless=True)" in text
    assert "Op microbenchmarks" not in text  # the chains' samples are not op benchmarks


def test_without_a_compiler_fusions_says_so_and_exits_2(tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    env = {**os.environ, "PATH": str(bare)}
    done = fusebench("fusions", "tiny", "--layers", "6", "--threads", "1", cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stderr
    assert "mx.compile makes no fused kernel here" in done.stderr
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.glob("results/*"))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nothing-such"], "neither a preset (26b, 31b"),
        ([str(ROOT), "--layers", "2"], "--layers 2: only for presets"),
        (["tiny", "--top", "-1"], "-1 is not >= 0"),
        (["tiny", "--format", "csv"], "invalid choice: 'csv'"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    done = fusebench("fusions", *args, cwd=tmp_path)
    assert done.returncode == 2
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert says in done.stderr.strip().splitlines()[-1]


# --- --confirm: the classes compiled, end to end ---------------------------------------------


def estimate(candidate: str, origin: str, in_model: str = "no", op: str = "") -> FusionEstimate:
    found = replace(
        record(candidate, {"prefill": 1}), origin=origin, compiled_by_model=in_model, op=op
    )
    return FusionEstimate(found, None, {}, {})


def test_confirm_picks_ops_in_ranking_order_and_says_why_it_passes_others_over() -> None:
    from fusebench.measure.fusions.confirm import Pick, picks

    ranked = [
        estimate("c4", "mlx_lm.models.gemma3_text.MLP"),
        estimate("c9", ""),
        estimate("c2", "fusebench.models.gemma4.MLP", op="geglu"),  # its op has a compiled variant
        estimate("c5", "fusebench.models.gemma4.Model"),
        estimate("c7", "mlx_lm.models.llama.MLP", in_model="whole"),
        estimate("c1", "mlx_lm.models.gemma3_text.RMSNorm"),
        estimate("c3", "mlx_lm.models.gemma3_text.MLP"),
        estimate("c6", "fusebench.models.gemma4.MLP", op="geglu"),
        estimate("c8", "mlx_lm.models.gemma3_text.Attention"),
    ]
    chosen, passed = picks(ranked, 3, {"geglu": "unfused"})
    assert chosen == [
        Pick("gemma3_text_mlp", ("c4", "c3"), "mlx_lm.models.gemma3_text.MLP"),
        Pick("geglu", ("c2", "c6")),
        Pick("gemma3_text_rmsnorm", ("c1",), "mlx_lm.models.gemma3_text.RMSNorm"),
    ]
    assert [reason.split(": ")[0] for reason in passed] == ["c9", "c5", "c7"]
    assert "outside fusebench's ops" in passed[1] and "compiles it already" in passed[2]
    # a model that runs the op compiled already: its chains are passed over, or their class taken
    again, _ = picks(ranked, 3, {"geglu": "compiled"})
    assert "geglu" not in [p.op for p in again]
    # --shapeless: a class's call compiled as the chains were; a registered op keeps its variant
    shapeless, _ = picks(ranked, 3, {"geglu": "unfused"}, shapeless=True)
    assert [p.variant for p in shapeless] == ["shapeless", "compiled", "shapeless"]
    assert shapeless[0].name == "gemma3_text_mlp-shapeless"


def test_confirm_switches_an_op_to_the_variant_expected_to_gain_most_a_plugins_too() -> None:
    from fusebench.analysis.amdahl import Amdahl
    from fusebench.analysis.fusions import VariantEstimate
    from fusebench.measure.fusions.confirm import picks

    def timed(op: str, variant: str, running: str, gain_pct: float) -> VariantEstimate:
        found = Amdahl(gain_pct, gain_pct - 0.1, gain_pct + 0.1)
        return VariantEstimate("m", op, variant, running, {"prefill": found}, 10)

    ranked = [
        estimate("c1", "fusebench.models.gemma4.Model", op="softcap"),
        estimate("c2", "fusebench.models.gemma4.RMSNorm", op="rms_norm"),
        estimate("c3", "fusebench.models.gemma4.MLP", op="geglu"),
    ]
    variants = [
        timed("softcap", "compiled", "unfused", -0.03),
        timed("softcap", "reciprocal", "unfused", 0.3),  # a plugin's hand-written one
        timed("rms_norm", "composed", "fast", -0.02),  # no gain: not a fusion to confirm
        timed("geglu", "compiled", "unfused", 0.17),
    ]
    chosen, passed = picks(ranked, 3, {}, variants=variants)
    assert [(p.op, p.variant) for p in chosen] == [("softcap", "reciprocal"), ("geglu", "compiled")]
    assert passed == [
        "c2: its op rms_norm runs fast; no compiled variant, and none expected to gain "
        "(composed, fast)"
    ]


def test_the_written_plugin_compiles_a_class_call_and_computes_the_same(
    tmp_path: Path, registry: object
) -> None:
    import mlx.core as mx
    from conftest import SMALL_MLX_LM

    from fusebench.measure.fusions.confirm import Pick, plugin_text
    from fusebench.measure.fusions.trace import compiled_nodes
    from fusebench.measure.plugins import load_plugins
    from fusebench.models.loading import build_model, seed_weights

    pick = Pick("llama_mlp", ("c1",), "mlx_lm.models.llama.MLP")
    plugin = tmp_path / "compiled_calls.py"
    plugin.write_text(plugin_text([pick]))
    load_plugins([plugin])
    model = build_model({**SMALL_MLX_LM, "model_type": "llama"})
    seed_weights(model, seed=1, dtype=mx.float32)
    tokens = mx.array([[3, 17, 42, 9, 100, 7, 55, 21]])
    assert "mlx_lm.models.llama.MLP.__call__" in [b.where for b in model.bindings]
    outputs = {}
    for variant in ("eager", "compiled", "shapeless"):
        model.set_ops({"llama_mlp": variant})
        outputs[variant] = model(tokens, cache=model.make_cache())
        # the model's own swiglu is compiled either way; compiled, the MLP's call is, whole
        assert any("Multiply" in node for node in compiled_nodes([outputs[variant]]))
        mx.eval(outputs[variant])
    assert mx.allclose(outputs["eager"], outputs["compiled"], atol=1e-5).item()
    assert mx.allclose(outputs["eager"], outputs["shapeless"], atol=1e-5).item()
    # shapeless: the same compiled call serves another prompt length
    longer = mx.array([[3, 17, 42, 9, 100, 7, 55, 21, 8, 8, 2]])
    model.set_ops({"llama_mlp": "eager"})
    eager = model(longer, cache=model.make_cache())
    model.set_ops({"llama_mlp": "shapeless"})
    assert mx.allclose(eager, model(longer, cache=model.make_cache()), atol=1e-5).item()


def test_the_confirming_run_is_read_into_one_record_per_class_and_metric(tmp_path: Path) -> None:
    from conftest import cell, results_file, trials

    from fusebench.measure.fusions.confirm import Pick, measured

    pick = Pick("gemma3_text_mlp", ("c4", "c3"), "mlx_lm.models.gemma3_text.MLP")
    experiment = (
        "name: confirm\nmodels: [{preset: gemma3-1b, layers: 6}]\n"
        "variants: {baseline: {}, gemma3_text_mlp-compiled: {}}\n"
        "comparisons: [[baseline, gemma3_text_mlp-compiled]]\n"
        "workloads: {prompt_tokens: 128, gen_tokens: 3}\ntrials: 8\n"
    )
    slower = [(100.0 + r % 3, 3.0 + 0.01 * (r % 2)) for r in range(8)]
    timed = trials(
        cell("Gemma-3-1B (6/26 layers)", gen=3),
        {
            "baseline": slower,
            "gemma3_text_mlp-compiled": [
                (p * (0.9 + 0.002 * (r % 3)), g) for r, (p, g) in enumerate(slower)
            ],
        },
    )
    for trial in timed:  # the prefill's peak: 10 MiB lower compiled; no decode peak recorded
        trial["prefill_peak_bytes"] = (90 if trial["variant"] != "baseline" else 100) * 2**20
    path = results_file(tmp_path / "r.jsonl", timed, experiment=experiment)
    found = measured("run", "Gemma-3-1B", [pick], path, tmp_path / "compiled_calls.py")
    by_metric = {r.metric: r for r in found}
    assert by_metric["prefill"].delta_pct == pytest.approx(-9.8, abs=0.1)
    assert by_metric["prefill"].verdict == "slower"
    low, high = by_metric["prefill"].low_pct, by_metric["prefill"].high_pct
    assert low < by_metric["prefill"].delta_pct < high < 0
    assert by_metric["gen"].candidates == ("c4", "c3") and by_metric["gen"].rounds == 8
    assert by_metric["prefill"].peak_change_bytes == -10 * 2**20
    assert by_metric["gen"].peak_change_bytes is None


def test_a_confirming_run_without_a_timed_trial_is_one_line(tmp_path: Path) -> None:
    from conftest import cell, results_file

    from fusebench.measure.fusions.confirm import ConfirmError, Pick, measured

    experiment = "name: confirm\nmodels: [{preset: gemma3-1b}]\nvariants: {baseline: {}}\n"
    failed = {"kind": "error", **cell("Gemma-3-1B"), "reason": "worker exited with code 1: boom"}
    path = results_file(tmp_path / "r.jsonl", [failed], experiment=experiment)
    pick = Pick("gemma3_text_mlp", ("c4",), "mlx_lm.models.gemma3_text.MLP")
    with pytest.raises(ConfirmError, match=r"holds no timed trial \(worker exited with code 1"):
        measured("run", "Gemma-3-1B", [pick], path, tmp_path / "p.py")


def test_a_variant_of_a_chains_op_is_weighed_at_its_calls_against_the_running_one() -> None:
    from fusebench.analysis.fusions import variant_estimates
    from fusebench.core.cell import ShareTime
    from fusebench.core.fusion import VariantRecord

    records = []
    for r in range(5):
        for variant, seconds in (("unfused", 0.010 + 1e-4 * (r % 2)), ("compiled", 0.008)):
            for phase, calls in (("prefill", 2), ("decode", 1)):
                share = ShareTime(phase, "geglu", variant, "[1,8,16]", calls, r, seconds, 2e-5)
                records.append(
                    VariantRecord(run_id="r", model="E2B", running="unfused", share=share)
                )
    steps = [
        StepRecord(run_id="r", model="E2B", phase=phase, round=r, seconds=seconds)
        for r in range(5)
        for phase, seconds in (("prefill", 1.0), ("decode", 0.1))
    ]
    (found,) = variant_estimates(records, steps)
    assert (found.op, found.variant, found.running, found.rounds) == (
        "geglu",
        "compiled",
        "unfused",
        5,
    )
    # two calls saving 2.04 ms each of a 1 s prefill; one of a 100 ms decode step
    assert found.expected["prefill"].delta_pct == pytest.approx(100 / (1 - 0.00408) - 100, rel=0.01)
    assert found.expected["gen"].delta_pct == pytest.approx(100 / (1 - 0.0204) - 100, rel=0.01)
