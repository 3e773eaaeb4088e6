"""summary.csv: the figures behind the report's tables, one row per machine x cell x metric x
variant of the trials, then one per `fusebench ops` run x op x shape x variant."""

from __future__ import annotations

import pandas as pd

from ..analysis import stats
from ..analysis.study import Study, size_rank, trial_medians
from ..core.fileformat import CELL_FIELDS, ROOFLINE_FIELDS, TTFT_FIELDS, Column
from .format import op_verdict_text


def summary_frame(study: Study) -> pd.DataFrame:
    """One row per machine x size x workload x metric x variant: median, quartiles, IQR, CV, n.

    Peak memory is added as its median, and so are the TTFT and roofline fields (TTFT_FIELDS,
    ROOFLINE_FIELDS) of trials that carry them.
    """
    timed = study.timed
    summary = stats.summary_table(timed)
    if summary.empty:
        return summary
    keys = ["machine", "model_key", "workload"]
    cells = timed[
        [*keys, *(f for f in CELL_FIELDS if f in timed and f not in keys)]
    ].drop_duplicates(keys)
    summary = summary.merge(cells.drop(columns="size"), on=keys, how="left")
    peaks = ("peak_memory_bytes", "prefill_peak_bytes", "gen_peak_bytes")
    extra = [c for c in (*peaks, *TTFT_FIELDS, *ROOFLINE_FIELDS) if c in timed.columns]
    if extra:
        medians = trial_medians(timed, extra).rename(columns={c: f"{c}_median" for c in extra})
        summary = summary.merge(medians, on=[*keys, "variant"], how="left")
    machine_rank = {m: i for i, m in enumerate(study.machines)}
    variant_rank = {v: i for i, v in enumerate(study.variants)}
    summary = summary.assign(
        _m=summary[Column.MACHINE].map(machine_rank),
        _s=summary[Column.SIZE].map(size_rank),
        _metric=summary["metric"].map(stats.METRICS.index),
        _v=summary[Column.VARIANT].map(variant_rank),
    ).sort_values(
        ["_m", "_s", "size", "prompt_tokens", "gen_tokens", "batch", "_metric", "_v"], kind="stable"
    )
    return summary.drop(columns=["_m", "_s", "_metric", "_v"]).reset_index(drop=True)


def op_summary_frame(study: Study) -> pd.DataFrame:
    """One row per `fusebench ops` run x op x shape x variant: the op table's figures (median time,
    GB/s, GFLOP/s, max abs err, and the Holm-adjusted Δ speed against the op's reference variant),
    so that an ops file's summary.csv holds its measurements rather than a header alone."""
    machines = {run_id: run.machine for run_id, run in study.runs.items()}
    return pd.DataFrame(
        [
            {
                "machine": machines.get(s.run_id or "", "unknown machine"),
                "run_id": s.run_id,
                "op": s.op,
                "shape": s.shape_label,
                "variant": s.variant,
                "reference": s.reference,
                "median_s": s.median_s,
                "gbps": s.gbps,
                "gflops": s.gflops,
                "max_abs_err": s.max_abs_err,
                "n": s.speed.n if s.speed else None,
                "delta_pct": s.speed.delta_pct if s.speed else None,
                "ci_low_pct": s.speed.low_pct if s.speed else None,
                "ci_high_pct": s.speed.high_pct if s.speed else None,
                "verdict": op_verdict_text(s),
            }
            for s in study.op_summaries
        ]
    )


def summary_csv(study: Study) -> pd.DataFrame:
    """summary.csv: the trial rows, then the op rows (an ops file has only those; the columns are
    their union)."""
    frames = [f for f in (summary_frame(study), op_summary_frame(study)) if not f.empty]
    return (
        pd.concat(frames, ignore_index=True)
        if len(frames) > 1
        else (frames[0] if frames else summary_frame(study))
    )
