"""fusebench project: the per-layer fit recovers known costs, its projection to full depth covers
the truth, and every input it cannot project is refused in one line with exit code 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import TEST_ENV, cell, fusebench_here, results_file, trials

from fusebench.analysis.projection import (
    ProjectionError,
    check_separable,
    full_depth,
    layer_counts,
    project,
    welch_dof,
)
from fusebench.analysis.study import build_study
from fusebench.commands.sources import load_results
from fusebench.present.sections import ReportContext
from fusebench.present.sections.projection import projection_section

# Seconds per step of each term (fixed, per sliding layer, per full layer, extra per KV-shared
# layer), per metric.
COSTS = {"prefill": (0.010, 0.003, 0.005, 0.004), "gen": (0.020, 0.001, 0.002, 0.0005)}
TERMS = ("fixed", "sliding", "full", "shared")
# The new variant's per-layer costs against the baseline's (the fixed part is the same).
NEW_SCALE = 0.9
PROMPT = 128
EXPERIMENT = """\
name: depths
models: [{preset: e2b, layers: 2}]
variants: {baseline: {}, compiled: {geglu: compiled}}
comparisons: [[baseline, compiled]]
workloads: {prompt_tokens: 128, gen_tokens: 4}
"""


def step_s(preset: str, layers: int, metric: str, scale: float = 1.0) -> float:
    fixed, sliding, full, shared = COSTS[metric]
    counts = layer_counts(preset, layers)
    return fixed + scale * (sliding * counts.sliding + full * counts.full + shared * counts.shared)


def depth_records(
    preset: str,
    size: str,
    depths: list[int],
    *,
    dtype: str = "float32",
    rounds: int = 10,
    noise: float = 0.002,
    seed: int = 0,
    run_id: str = "run1",
    process_sd: float = 0.0,
) -> list[dict]:
    """Timed trials of both variants at each depth, their times the model's with small
    multiplicative noise; with `process_sd`, each depth's worker process off by its own factor, for
    both variants alike."""
    rng = np.random.default_rng(seed)
    records = []
    for depth in depths:
        of = {
            **cell(
                f"{size} ({depth}/{full_depth(preset)} layers)",
                run_id=run_id,
                prompt=PROMPT,
                key=f"{preset}:layers={depth}:{dtype}:none",
            ),
            "model": preset,
            "layers": depth,
            "dtype": dtype,
        }
        process = 1 + process_sd * rng.standard_normal() if process_sd else 1.0
        times = {
            variant: [
                (
                    step_s(preset, depth, "prefill", scale)
                    * process
                    * (1 + noise * rng.standard_normal()),
                    step_s(preset, depth, "gen", scale)
                    * process
                    * (1 + noise * rng.standard_normal()),
                )
                for _ in range(rounds)
            ]
            for variant, scale in (("baseline", 1.0), ("compiled", NEW_SCALE))
        }
        records += trials(
            of, {v: [(PROMPT / p, 1 / g) for p, g in values] for v, values in times.items()}
        )
    return records


@pytest.fixture
def e2b_file(tmp_path: Path) -> Path:
    return results_file(
        tmp_path / "e2b.jsonl", depth_records("e2b", "E2B", [2, 4, 6, 8, 12]), experiment=EXPERIMENT
    )


def projected(path: Path, **options):
    study = build_study(load_results([path]))
    return project(study, [("baseline", "compiled")], **options)


def fits_of(projection):
    return [fit for row in projection.rows for fit in row.fits]


def one_line_exit_2(done, expected: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert expected in done.stderr, done.stderr


# (own sliding, own full, shared sliding, shared full) at each depth, as the runner's
# fusebench.models.config.truncate lays them out.
LAYOUTS = {
    "e2b": {
        2: (1, 1, 0, 0),
        4: (1, 1, 1, 1),
        6: (2, 1, 2, 1),
        8: (2, 1, 4, 1),
        12: (4, 1, 5, 2),
        35: (12, 3, 16, 4),
    },
    "e4b": {
        2: (1, 1, 0, 0),
        4: (1, 1, 1, 1),
        6: (2, 1, 2, 1),
        8: (4, 1, 2, 1),
        12: (5, 2, 4, 1),
        42: (20, 4, 15, 3),
    },
    "26b": {
        2: (1, 1, 0, 0),
        4: (3, 1, 0, 0),
        6: (5, 1, 0, 0),
        8: (6, 2, 0, 0),
        12: (10, 2, 0, 0),
        30: (25, 5, 0, 0),
    },
    "31b": {
        2: (1, 1, 0, 0),
        4: (3, 1, 0, 0),
        6: (5, 1, 0, 0),
        8: (6, 2, 0, 0),
        12: (10, 2, 0, 0),
        60: (50, 10, 0, 0),
    },
}


@pytest.mark.parametrize("preset", LAYOUTS)
def test_layer_counts_follow_the_runners_layout(preset: str):
    for depth, (own_sliding, own_full, shared_sliding, shared_full) in LAYOUTS[preset].items():
        counts = layer_counts(preset, depth)
        assert (counts.sliding, counts.full, counts.shared) == (
            own_sliding + shared_sliding,
            own_full + shared_full,
            shared_sliding + shared_full,
        ), depth


def test_the_fit_recovers_each_terms_cost(e2b_file: Path):
    projection = projected(e2b_file)
    assert len(fits_of(projection)) == 4  # two variants × two metrics
    for fit in fits_of(projection):
        scale = NEW_SCALE if fit.series.variant == "compiled" else 1.0
        truth = [
            cost * (1 if term == "fixed" else scale)
            for term, cost in zip(TERMS, COSTS[fit.series.metric], strict=True)
        ]
        assert fit.terms == TERMS and fit.depths == (2, 4, 6, 8, 12) and fit.dof == 1
        for term, true in zip(TERMS, truth, strict=True):
            value, half = fit.cost(term)
            assert abs(value - true) <= half, (
                fit.series.variant,
                fit.series.metric,
                term,
                value,
                true,
                half,
            )


def test_the_projection_at_full_depth_covers_the_truth(e2b_file: Path):
    projection = projected(e2b_file)
    for row in projection.rows:
        scale = NEW_SCALE if row.variant == "compiled" else 1.0
        assert row.size == "E2B (35/35 layers, projected)" and row.layers == 35
        assert row.prefill.low <= PROMPT / step_s("e2b", 35, "prefill", scale) <= row.prefill.high
        assert row.gen.low <= 1 / step_s("e2b", 35, "gen", scale) <= row.gen.high
    assert [(d.baseline, d.new, d.metric) for d in projection.deltas] == [
        ("baseline", "compiled", "prefill"),
        ("baseline", "compiled", "gen"),
    ]
    for delta in projection.deltas:
        true = step_s("e2b", 35, delta.metric) / step_s("e2b", 35, delta.metric, NEW_SCALE)
        assert delta.low <= true <= delta.high
        # At 2 layers the fixed part dominates; at 35 the Δ is the per-layer one's larger share of
        # it.
        assert delta.ratio > step_s("e2b", 2, delta.metric) / step_s(
            "e2b", 2, delta.metric, NEW_SCALE
        )


def _runs_files(
    tmp_path: Path, runs: int, depths: list[int], process_sd: float = 0.05
) -> list[Path]:
    return [
        results_file(
            tmp_path / f"run{r}.jsonl",
            depth_records("e2b", "E2B", depths, seed=r, run_id=f"run{r}", process_sd=process_sd),
            experiment=EXPERIMENT,
            run_id=f"run{r}",
        )
        for r in range(runs)
    ]


def test_several_runs_give_each_depth_the_spread_between_processes(tmp_path: Path):
    # Three runs, each depth's process 5% off: the rounds alone (0.2% noise) would claim intervals
    # ~25x too narrow.
    paths = _runs_files(tmp_path, 3, [2, 4, 6, 8, 12])
    study = build_study(load_results(paths))
    projection = project(study, [("baseline", "compiled")], fit_layers=[2, 4, 6, 8], layers=12)
    for fit in fits_of(projection):
        spread = fit.series.between_runs
        # five depths, three runs each: 2 dof apiece
        assert spread is not None and spread.dof == 5 * 2
        assert 0.02 < spread.relative_sd < 0.09
        assert all(p.runs == 3 and p.dof == 10 for p in fit.points)
        assert fit.time_at(12).dof == 10  # one pooled spread: its dof, not a Welch sum
        assert "runs ±" in fit.residual_note and "3 per depth, 10 dof" in fit.residual_note
    # The held-out depth is checked against a prediction interval: the projection's and the
    # measurement's noise.
    held_out = [c for c in projection.checks if not c.in_fit]
    assert held_out and all(c.predicted.low < c.fitted.low for c in held_out)
    # A Δ pairs the variants of each run: the processes' factors cancel in the ratio, so its
    # interval is far narrower than the two fits' own, and still holds the true Δ.
    for delta in projection.deltas:
        true = step_s("e2b", 12, delta.metric) / step_s("e2b", 12, delta.metric, NEW_SCALE)
        assert delta.low <= true <= delta.high
        fits = {f.series.variant: f for f in fits_of(projection) if f.series.metric == delta.metric}
        base = fits["baseline"].rate_at(12)
        assert delta.high_pct - delta.low_pct < 0.5 * 100 * (base.high - base.low) / base.tps


def test_one_run_per_depth_says_so(e2b_file: Path):
    for fit in fits_of(projected(e2b_file)):
        assert fit.series.between_runs is None and fit.residual_note.endswith("; 1 run per depth")


def test_welch_satterthwaite_dof():
    assert welch_dof([1.0, 1.0], [5, 5]) == pytest.approx(10)  # two equal parts: their dofs add
    assert welch_dof([1.0, 0.0], [5, 3]) == pytest.approx(5)  # a part with no weight lends no dof
    assert 5 < welch_dof([1.0, 0.2], [5, 5]) < 10
    assert welch_dof([0.0, 0.0], [5, 5]) == math.inf


def test_the_interval_dof_comes_from_the_depths_rounds(e2b_file: Path):
    """Welch–Satterthwaite over the fitted depths' rounds (10 each): between 9 and their sum; no
    more than the residual dof where χ²/dof widened the fit."""
    exact, widened = projected(e2b_file, fit_layers=[2, 4, 6, 8]), projected(e2b_file)
    for fit in fits_of(exact):
        assert 9 <= fit.time_at(35).dof <= 36
    # this seed exercises both rules
    assert {fit.inflated for fit in fits_of(widened)} == {True, False}
    for fit in fits_of(widened):
        dof = fit.time_at(35).dof
        assert dof <= 1 if fit.inflated else 9 <= dof <= 45


def test_a_depth_held_out_of_the_fit_is_checked_against_it(e2b_file: Path):
    projection = projected(e2b_file, layers=12, fit_layers=[2, 4, 6, 8])
    assert {row.size for row in projection.rows} == {"E2B (12/35 layers, projected)"}
    held_out = [c for c in projection.checks if not c.in_fit]
    assert {(c.depth, c.size) for c in held_out} == {(12, "E2B (12/35 layers)")} and len(
        held_out
    ) == 4
    assert all(abs(c.error_pct) < 1 for c in held_out)
    # four depths, four terms: an exact fit
    assert all(f.reduced_chi2 is None for f in fits_of(projection))


def test_project_prints_json_rows_and_text(e2b_file: Path, tmp_path: Path):
    done = fusebench_here("project", str(e2b_file), "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [row["variant"] for row in rows] == ["baseline", "compiled"]
    for row in rows:
        assert row["size"] == "E2B (35/35 layers, projected)" and row["layers"] == 35
        assert row["prefill_low"] < row["prefill_tps"] < row["prefill_high"]
        assert row["gen_low"] < row["gen_tps"] < row["gen_high"]
    assert [d["baseline"] for d in rows[1]["deltas"]] == ["baseline", "baseline"] and not rows[0][
        "deltas"
    ]
    text = fusebench_here(
        "project", str(e2b_file), "--fit-layers", "2,4,6,8", "--layers", "12", cwd=tmp_path
    )
    assert text.returncode == 0, text.stderr
    assert "E2B (12/35 layers, projected)" in text.stdout and "Held out of the fit" in text.stdout


def test_depths_that_cannot_separate_the_terms_are_refused():
    with pytest.raises(ProjectionError) as refused:
        check_separable("26b", "26B", [2, 4, 6])
    message = str(refused.value)
    assert (
        "the fixed part" in message
        and "full-attention layers" in message
        and "add depth 8" in message
    )
    with pytest.raises(ProjectionError, match="add depths 6 and 8"):
        check_separable("e2b", "E2B", [2, 4])
    check_separable("26b", "26B", [2, 4, 6, 8])
    check_separable("e2b", "E2B", [2, 4, 6, 8])


def test_projection_section_only_for_results_at_several_depths(e2b_file: Path, tmp_path: Path):
    def section(path: Path) -> list:
        study = build_study(load_results([path]))
        return projection_section(ReportContext(study, [("baseline", "compiled")], tmp_path))

    blocks = section(e2b_file)
    assert blocks[0].text == "At full depth (projected)" and "not measured" in blocks[1].text
    one_depth = results_file(
        tmp_path / "one.jsonl", depth_records("e2b", "E2B", [2]), experiment=EXPERIMENT
    )
    assert section(one_depth) == []


def _checkpoint_records() -> list[dict]:
    of = {
        **cell("x"),
        "model": "/models/x",
        "model_key": "/models/x:layers=all:float32:none",
        "layers": None,
    }
    return trials(
        of, {"baseline": [(100.0, 10.0), (101.0, 10.1)], "compiled": [(110.0, 11.0), (111.0, 11.1)]}
    )


BAD_INPUTS = {
    "one depth": (
        [("r.jsonl", depth_records("e2b", "E2B", [2]), TEST_ENV)],
        (),
        "E2B (pp128 tg4 b1) has only depth 2: a projection "
        "needs at least 4 depths, e.g. `layers: [2, 4, 6, 8]`",
    ),
    "26b at 2, 4, 6": (
        [("r.jsonl", depth_records("26b", "26B", [2, 4, 6]), TEST_ENV)],
        (),
        "cannot separate the fixed part (embeddings, LM head, sampling) from the full-attention",
    ),
    "two machines": (
        [
            ("a.jsonl", depth_records("e2b", "E2B", [2, 4]), TEST_ENV),
            (
                "b.jsonl",
                depth_records("e2b", "E2B", [6, 8], run_id="run2"),
                {**TEST_ENV, "hostname": "other", "device": "Other CPU"},
            ),
        ],
        (),
        "runs from 2 machines",
    ),
    "mixed dtypes": (
        [
            (
                "r.jsonl",
                depth_records("e2b", "E2B", [2])
                + depth_records("e2b", "E2B", [4, 6, 8], dtype="bfloat16"),
                TEST_ENV,
            )
        ],
        (),
        "ran in another dtype or quantization, fitted apart: never mixed)",
    ),
    "checkpoint": (
        [("r.jsonl", _checkpoint_records(), TEST_ENV)],
        (),
        "x is a checkpoint (path) model",
    ),
    "layers out of range": (
        [("r.jsonl", depth_records("e2b", "E2B", [2, 4, 6, 8]), TEST_ENV)],
        ("--layers", "36"),
        "--layers 36 is out of range for E2B (e2b has 35 layers); choose 1..35",
    ),
    "fit layers not measured": (
        [("r.jsonl", depth_records("e2b", "E2B", [2, 4, 6, 8]), TEST_ENV)],
        ("--fit-layers", "2,4,6,10"),
        "was not measured at depth 10",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(case: str, tmp_path: Path):
    files, options, expected = BAD_INPUTS[case]
    paths = []
    for name, records, env in files:
        run_id = records[0]["run_id"]
        paths.append(
            str(
                results_file(
                    tmp_path / name, records, experiment=EXPERIMENT, run_id=run_id, env=env
                )
            )
        )
    one_line_exit_2(fusebench_here("project", *paths, *options, cwd=tmp_path), expected)
