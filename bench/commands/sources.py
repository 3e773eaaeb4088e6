"""The files the analysis judges, read for it: results files (merged for a report), noise files,
references, and the runs a calibration reads. analysis/ opens no file itself
(tests/test_architecture.py): what it is given, it judges; a file's errors name the file here."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from ..analysis.noise import SCOPES, Calibration, NoiseFileError, aa_comparisons
from ..analysis.reference import Reference, ReferenceFileError, reference_from
from ..analysis.study import current_build
from ..core.calibration import NOISE_KIND, Noise
from ..core.experiment import Experiment
from ..core.fileformat import REQUIRED_FIELDS, ResultsError, require_fields
from ..core.results import Results, read_results, results_fingerprint
from ..core.spec import parse_experiment
from ..core.typed import from_mapping

# the references fusebench ships, by short name: reference_<name>.yaml
SHIPPED_DIR = Path(__file__).parents[1] / "data"


def load_results(paths: Sequence[str | Path], warn: Callable[[str], None] | None = None) -> Results:
    """Read and merge results files. Each must hold timed trials or op records (`fusebench ops`),
    all well formed; otherwise the error names the file."""
    merged = Results()
    for path in _once(paths):
        one = read_results([path], warn=warn)
        for kind in REQUIRED_FIELDS:
            require_fields(path, one.of_kind(kind), kind)
        if not any(not r["warmup"] for r in one.of_kind("trial")) and not one.of_kind("op"):
            found = ", ".join(
                f"{n} {kind}" for kind, n in Counter(r["kind"] for r in one.records).items()
            )
            raise ResultsError(f"{path}: no timed trial or op records to report (found {found})")
        # A copy of a file, or a baseline saved from it, holds the same records again: merge counts
        # each once.
        merged.merge(one, path, warn=warn)
    return merged


def _once(paths: Sequence[str | Path]) -> list[Path]:
    """The paths in order, a file given twice (by any spelling) only the first time, as its user
    wrote it."""
    first: dict[Path, Path] = {}
    for path in map(Path, paths):
        first.setdefault(path.resolve(), path)
    return list(first.values())


def load_noise(path: Path) -> Noise:
    """Read a noise file written by `fusebench calibrate`; anything else is a NoiseFileError naming
    the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NoiseFileError(
            f"{path}: no such noise file; make one with fusebench calibrate"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise NoiseFileError(f"{path}: not a noise file ({' '.join(str(err).split())})") from None
    if not isinstance(data, dict) or data.get("kind") != NOISE_KIND:
        raise NoiseFileError(f'{path}: not a noise file (expected "kind": "{NOISE_KIND}")')
    try:
        stored = from_mapping(Noise, data)
        return dataclasses.replace(
            stored, bands={scope: stored.bands.get(scope, {}) for scope in SCOPES}
        )
    except (KeyError, TypeError, AttributeError) as err:
        raise NoiseFileError(
            f"{path}: malformed noise file ({type(err).__name__}: {err})"
        ) from None


def experiment_of_runs(paths: list[Path]) -> Experiment:
    """The one experiment that every results file ran (from its run header), validated again."""
    headers = {path: next(iter(read_results([path]).headers.values()), None) for path in paths}
    missing = [path for path, header in headers.items() if header is None]
    if missing:
        raise ResultsError(f"{missing[0]}: no run header; is it a fusebench results file?")
    experiments = {
        run.experiment.sha256: (path, run.experiment) for path, run in headers.items() if run
    }
    if len(experiments) > 1:
        names = ", ".join(f"{path} ({e.file})" for path, e in experiments.values())
        raise ResultsError(f"--from: runs of different experiments (or versions of one): {names}")
    path, experiment = next(iter(experiments.values()))
    exp = parse_experiment(
        experiment.content, f"{path} (run header: {experiment.file})", stored=True
    )
    return dataclasses.replace(exp, file=experiment.file)


def calibrate_from(paths: list[Path], comparisons: list[tuple[str, str]]) -> Calibration:
    """The machine the runs were measured on and every A/A comparison among them. From a run
    --against file only the current build counts: the reference build is another tree."""
    machines = []
    runs = []
    for path in paths:
        results = read_results([path])
        machines.append(results_fingerprint(results, path))
        runs.append(current_build(results.frame("trial")))
    if len(set(machines)) > 1:
        raise ResultsError(
            f"calibration runs came from different machines: {' | '.join(map(str, set(machines)))}"
        )
    return Calibration(machines[0], aa_comparisons(runs, comparisons))


def load_reference(name_or_path: str) -> Reference:
    """Load a reference from a YAML file, or a shipped one by its short name (e.g. "pr15587")."""
    path = _resolve(name_or_path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ReferenceFileError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return reference_from(data, path)


def shipped_names() -> list[str]:
    return sorted(p.stem.removeprefix("reference_") for p in SHIPPED_DIR.glob("reference_*.yaml"))


def _resolve(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.is_file():
        return path
    candidate = SHIPPED_DIR / f"reference_{name_or_path}.yaml"
    if candidate.is_file():
        return candidate
    shipped = ", ".join(shipped_names())
    raise ReferenceFileError(
        f"--reference: no file {name_or_path!r}, nor a shipped reference of that name ({shipped})"
    )
