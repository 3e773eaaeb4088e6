"""Other Python environments for a reference build (`run --against-env SPEC`, `bisect --package`).

SPEC is a Python interpreter, a virtual environment's folder, or requirement specifiers
("mlx==0.31.2"). For specifiers fusebench builds a virtual environment once and caches it by the
exact requirement list. What goes into it, and why: the named specifiers; with `mlx==V` on a machine
whose mlx backend is the `mlx-cpu` wheel, `mlx-cpu==V` too (the two wheels must match); and
fusebench's own dependencies that SPEC does not name, pinned to this environment's versions. So the
environment is self-contained (nothing leaks in from this one), and the two builds differ only in
what SPEC names and what pip must change to satisfy it; the run header records both sides' versions.
A given interpreter is used as it is: it must import fusebench's dependencies itself.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ...core.errors import UserError

ENV_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fusebench" / "envs"
# The packages whose versions tell two environments apart in a run header and a table's label.
REPORTED = ("mlx", "mlx-cpu", "mlx-lm")
_REQUIREMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[\w,-]+\])?((?:[=!<>~]=?[\w.*+!-]+,?)*)")
_READY = "fusebench-env.json"


class EnvSpecError(UserError):
    """An environment that cannot serve as a build: not a Python, a package or version pip cannot
    install."""


@dataclass(frozen=True)
class Environment:
    """A Python environment a build's workers run in."""

    python: str
    spec: str
    label: str
    requirements: tuple[str, ...] = ()  # what was installed, for an environment fusebench built
    shown: tuple[str, ...] = ("mlx", "mlx-lm")  # the packages its label names
    packages: dict[str, str] = field(default_factory=dict, compare=False)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def is_interpreter_spec(spec: str) -> bool:
    """A path (it names a folder or file, or has a path separator), not requirement specifiers."""
    return os.sep in spec or Path(spec).expanduser().exists()


def requirements_of(spec: str, what: str) -> list[str]:
    """'mlx==0.31.2 mlx-cpu==0.31.2' (or comma-separated) -> the specifiers, each checked."""
    items = [item for item in re.split(r"[\s;]+", spec.strip()) if item]
    bad = [item for item in items if not _REQUIREMENT.fullmatch(item)]
    if not items or bad:
        raise EnvSpecError(
            f"{what}: {bad[0] if bad else repr(spec)} is neither a Python interpreter, a virtual "
            "environment's folder, nor requirement specifiers such as 'mlx==0.31.2 mlx-cpu==0.31.2'"
        )
    return items


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def full_requirements(named: list[str]) -> list[str]:
    """SPEC's specifiers, the matching mlx-cpu, and fusebench's other dependencies pinned to this
    environment's."""
    names = names_of(named)
    extra = []
    mlx_pin = next(
        (r for r in named if canonical(_REQUIREMENT.fullmatch(r).group(1)) == "mlx" and "==" in r),
        None,
    )
    if mlx_pin and "mlx-cpu" not in names and installed("mlx-cpu"):
        extra.append(f"mlx-cpu=={mlx_pin.split('==', 1)[1]}")
        names.add("mlx-cpu")
    ours = [req for req in importlib.metadata.requires("fusebench") or [] if "extra ==" not in req]
    ours += ["mlx-cpu"] if installed("mlx-cpu") else []
    for req in ours:
        name = canonical(re.match(r"[A-Za-z0-9._-]+", req).group(0))
        if name not in names and (version := installed(name)):
            extra.append(f"{name}=={version}")
            names.add(name)
    return [*named, *extra]


def resolve(spec: str, what: str, say=print) -> Environment:
    """The environment SPEC names, built (once, cached) when it is requirement specifiers."""
    if is_interpreter_spec(spec):
        python = _interpreter(Path(spec).expanduser(), what)
        packages = versions(python)
        return Environment(
            str(python), spec, f"{label(packages, ('mlx', 'mlx-lm'))} ({python})", packages=packages
        )
    named = requirements_of(spec, what)
    requirements = tuple(full_requirements(named))
    key = hashlib.sha256(json.dumps([sys.version_info[:2], requirements]).encode()).hexdigest()[:16]
    folder = ENV_CACHE / key
    if not (folder / _READY).is_file():
        say(
            f"building the environment for {' '.join(named)} "
            f"in {folder} (once; pip: {' '.join(requirements)})"
        )
        _build(folder, requirements, what)
    else:
        say(f"environment for {' '.join(named)}: {folder} (cached)")
    python = folder / "bin" / "python"
    packages = versions(python)
    # mlx-cpu goes with mlx; naming both in the label would say the same version twice.
    shown = tuple(
        n
        for n in (canonical(_REQUIREMENT.fullmatch(r).group(1)) for r in named)
        if n != "mlx-cpu" or "mlx" not in names_of(named)
    )
    return Environment(str(python), spec, label(packages, shown), requirements, shown, packages)


def names_of(requirements: list[str]) -> set[str]:
    return {canonical(_REQUIREMENT.fullmatch(r).group(1)) for r in requirements}


def label(packages: dict[str, str], names: tuple[str, ...]) -> str:
    """ "mlx 0.31.2, mlx-lm 0.32.2": how a table names a build by its environment."""
    return ", ".join(f"{n} {packages.get(n, '?')}" for n in names)


def _interpreter(path: Path, what: str) -> Path:
    python = path / "bin" / "python" if path.is_dir() else path
    try:
        done = subprocess.run(
            [str(python), "-c", "import sys; print(sys.version_info[0])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is None or done.returncode != 0 or done.stdout.strip() != "3":
        raise EnvSpecError(
            f"{what}: {path} is not a Python 3 interpreter (nor "
            "a virtual environment's folder holding bin/python)"
        )
    return python


def _build(folder: Path, requirements: tuple[str, ...], what: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)  # a build that was interrupted
    folder.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True)
    done = subprocess.run(
        [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", *requirements],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
        reason = (
            errors[0].removeprefix("ERROR: ")
            if errors
            else f"pip exited with code {done.returncode}"
        )
        raise EnvSpecError(f"{what}: pip cannot install {' '.join(requirements)}: {reason}")
    (folder / _READY).write_text(json.dumps({"requirements": requirements}))


def versions(python: Path | str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The REPORTED packages' versions as that interpreter sees them, mlx's read from `mlx.core`
    itself."""
    script = (
        "import importlib.metadata as m, json, sys\nout = {}\nfor n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n    except m.PackageNotFoundError: pass\n"
        "try:\n    import mlx.core as mx; out['mlx'] = mx.__version__\nexcept Exception: pass\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [str(python), "-c", script, *REPORTED], capture_output=True, text=True, check=False, env=env
    )
    return json.loads(done.stdout) if done.returncode == 0 else {}


def package_versions(name: str, what: str) -> list[str]:
    """The released versions of NAME on the package index, oldest first."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", name],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("Available versions:")), None)
    if line is None:
        raise EnvSpecError(f"{what}: the package index has no package {name!r}")
    return sorted((v.strip() for v in line.split(":", 1)[1].split(",")), key=version_key)


def version_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else -1 for part in re.split(r"[.+-]", version))


def between(versions_: list[str], good: str, bad: str, what: str) -> list[str]:
    """The versions from GOOD to BAD, both included, oldest first."""
    for version in (good, bad):
        if version not in versions_:
            raise EnvSpecError(
                f"{what}: no release {version} on the package index; it has "
                f"{', '.join(versions_[-12:])}{' ...' if len(versions_) > 12 else ''}"
            )
    low, high = versions_.index(good), versions_.index(bad)
    if low >= high:
        raise EnvSpecError(
            f"{what}: GOOD_VERSION {good} must be an older release than BAD_VERSION {bad}"
        )
    return versions_[low : high + 1]
