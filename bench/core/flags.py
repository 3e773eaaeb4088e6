"""The experiment as the command line shapes it: the file a name stands for (`fusebench run ci`:
the shipped experiments), one written from flags (`run --model M --op OP=A,B`), and the flags that
change one (`--trials`, `--budget`, `--only`, `--shard`).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import yaml

from .errors import SpecError, UserError
from .experiment import AUTO, BUDGETED, DEFAULT_MAX_ROUNDS, Cell, Experiment, Trials

SHARD_FORM = "I/N with 1 <= I <= N"


def shipped_folder() -> Path:
    """Where the experiments that ship with fusebench are: a wheel installs them in the package
    (fusebench/experiments), a checkout keeps them at its top (experiments/, beside bench/)."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "experiments"
    return installed if installed.is_dir() else package.parent / "experiments"


def shipped_experiments() -> dict[str, Path]:
    """The shipped experiments by name (the file's stem): `fusebench run ci` works from any
    folder."""
    return {path.stem: path for path in sorted(shipped_folder().glob("*.yaml"))}


def experiment_path(given: str | Path) -> Path:
    """The experiment file `given` names: a path to a file, or the name of a shipped experiment."""
    path = Path(given)
    if path.is_file():
        return path
    shipped = shipped_experiments()
    if os.sep not in str(given) and path.stem in shipped:
        found = shipped[path.stem].resolve()
        return found.relative_to(Path.cwd()) if found.is_relative_to(Path.cwd()) else found
    names = ", ".join(shipped)
    raise SpecError(
        str(given),
        0,
        "file",
        f"no such file, nor a shipped experiment of that name; give a path to "
        f"a YAML file or one of: {names} (fusebench run --list)",
    )


# What an experiment from `run --model ... --op ...` takes that an experiment file would spell out:
# rounds until decided, with a budget that suits one model (the first rounds' word comes within a
# minute or two of a 2-layer model on a slow 2-core VM).
FLAGS_BUDGET_S_PER_MODEL = 150
FLAGS_MARGIN_PCT = 5.0


def experiment_from_flags(
    models: Sequence[Mapping[str, object]],
    ops: Sequence[tuple[str, Sequence[str]]],
    prompt_tokens: int,
    gen_tokens: int,
) -> str:
    """The experiment file `run --model M --op OP=A,B ...` stands for, as YAML text. Several --op
    flags form a matrix: every combination of their values is a variant, the first values together
    the baseline, compared with each other variant. One --op names its variants by its values
    (`unfused`, `compiled`); several by op and value (`geglu-compiled_softcap-unfused`)."""
    combinations = list(itertools.product(*(values for _, values in ops)))
    names = [op for op, _ in ops]

    def variant_name(values: tuple[str, ...]) -> str:
        if len(values) == 1:
            return values[0]
        return "_".join(f"{op}-{value}" for op, value in zip(names, values, strict=True))

    variants = {
        variant_name(values): dict(zip(names, values, strict=True)) for values in combinations
    }
    return quick_experiment(models, variants, "-".join(names), prompt_tokens, gen_tokens)


def quick_experiment(
    models: Sequence[Mapping[str, object]],
    variants: Mapping[str, Mapping[str, str]],
    label: str,
    prompt_tokens: int,
    gen_tokens: int,
    *,
    plugins: Sequence[str] = (),
    description: str = "made by fusebench run from flags",
    budget_s: float | None = None,
) -> str:
    """An experiment that compares the first variant with each other one, with the rules a run
    from flags takes (rounds until decided; by default a budget that suits one model per model),
    as YAML."""
    baseline, *others = variants
    head = models[0]
    first = head.get("preset") or str(head.get("repo") or head.get("path")).split("/")[-1]
    document = {
        "name": re.sub(r"[^A-Za-z0-9._-]+", "-", f"{first}-{label}"),
        "description": description,
        "models": [dict(model) for model in models],
        **({"plugins": list(plugins)} if plugins else {}),
        "variants": {name: dict(ops) for name, ops in variants.items()},
        "comparisons": [[baseline, other] for other in others],
        "workloads": {"prompt_tokens": prompt_tokens, "gen_tokens": gen_tokens, "batch": 1},
        "trials": AUTO,
        "max_rounds": DEFAULT_MAX_ROUNDS * 2,
        "budget_s": budget_s or FLAGS_BUDGET_S_PER_MODEL * len(models),
        "margin_pct": FLAGS_MARGIN_PCT,
        "correctness": {"reference": baseline, "tokens": 2},
    }
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)


def with_trials(exp: Experiment, rounds: int) -> Experiment:
    """`run --trials N`: exactly N timed rounds per cell. Another rule is turned off: kept, it
    would take N for its max_rounds and might stop before N."""
    return replace(exp, trials=Trials.FIXED, rounds=rounds, target_pct=None, budget_s=None)


def with_budget(exp: Experiment, budget_s: float) -> Experiment:
    """`run --budget`: the experiment's budget_s replaced; only where a rule spends one."""
    if exp.trials not in BUDGETED:
        raise UserError(
            f"--budget: {exp.file} has trials: {exp.rounds} (rounds fixed in the file); a budget "
            f"needs trials: plan, {Trials.AUTO} or budget"
        )
    return replace(exp, budget_s=budget_s)


def select_models(
    exp: Experiment, names: Sequence[str] | None, option: str = "--only"
) -> Experiment:
    """Keep the models whose size label or preset is named (case-insensitive), e.g.
    `--only E2B,26b`."""
    if not names:
        return exp
    wanted = {name.lower() for name in names}
    known = {m.size.lower() for m in exp.models} | {(m.preset or "").lower() for m in exp.models}
    unknown = sorted(wanted - known)
    if unknown:
        choices = ", ".join(sorted({m.size for m in exp.models}))
        raise UserError(f"{option}: {', '.join(unknown)} not in {exp.file}; choose from {choices}")
    models = tuple(
        m for m in exp.models if m.size.lower() in wanted or (m.preset or "").lower() in wanted
    )
    return replace(exp, models=models)


def shard_cells(cells: list[Cell], index: int, count: int) -> list[Cell]:
    """Shard `index` of `count` (1-based). Round-robin, so each shard gets a mix of models and
    sizes."""
    _check_shard(index, count, f"{index}/{count}")
    return cells[index - 1 :: count]


def _check_shard(index: int, count: int, text: str) -> None:
    if not 1 <= index <= count:
        raise UserError(f"bad shard {text!r}: expected {SHARD_FORM}, e.g. 2/4")
