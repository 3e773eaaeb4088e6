"""A real user's machine: no MLX backend, no root for a BLAS, a folder outside the checkout, a run
that was killed. Faults are made in fixtures (a stand-in mlx package that fails as a backend-less
install does, a dead owner's tree), never through hooks in the product."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, fusebench, fusebench_here

from fusebench.measure.builds import builds
from fusebench.measure.machine.env import blas_preload_env

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="LD_PRELOAD and the shim are Linux's"
)


@pytest.fixture
def no_backend(tmp_path: Path) -> dict[str, str]:
    """An environment whose `import mlx.core` fails as it does after `pip install mlx` alone on
    Linux."""
    fake = tmp_path / "fake" / "mlx"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "core.py").write_text(
        "raise ImportError('libmlx.so: cannot open shared "
        "object file: No such file or directory')\n"
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(ROOT)])}


@pytest.mark.parametrize(
    "args", [("run", "--dry-run"), ("run", "ci"), ("verify",), ("kernels",), ("ops",)]
)
def test_a_command_that_needs_mlx_names_the_extra_when_there_is_no_backend(
    args, no_backend, tmp_path
):
    done = fusebench(*args, cwd=tmp_path, env=no_backend)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert (
        "no backend" in done.stderr
        and "fusebench[cpu]" in done.stderr
        and "libmlx.so" in done.stderr
    )


def test_env_flags_a_missing_backend(no_backend, tmp_path):
    done = fusebench("env", cwd=tmp_path, env=no_backend)
    assert done.returncode == 2
    assert "no MLX backend" in done.stdout and "fusebench[cpu]" in done.stdout
    assert "python" in done.stdout  # the table still shows what can be read without mlx


def test_a_shipped_experiment_runs_by_name_from_any_folder(tmp_path):
    done = fusebench("run", "ci", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "variant baseline" in done.stdout


def test_run_list_shows_every_shipped_experiment_with_its_description(tmp_path):
    done = fusebench_here("run", "--list", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shipped = sorted(p.stem for p in (ROOT / "experiments").glob("*.yaml"))
    assert shipped and all(name in done.stdout for name in shipped)
    assert "regression gate" in done.stdout  # ci's description


def test_an_unknown_experiment_name_lists_the_shipped_ones(tmp_path):
    done = fusebench_here("run", "no-such-experiment", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "no-such-experiment:0: file:" in done.stderr and "ci, default" in done.stderr


@linux_only
def test_pypi_openblas_behind_the_shim_serves_mlx_matmuls(tmp_path):
    blas_shim = pytest.importorskip("fusebench.measure.machine.blas_shim")
    pytest.importorskip("scipy_openblas32", reason="setup.sh --dev installs it on Linux")
    shim = blas_shim.shim(
        tmp_path
    )  # built on first use into the cache it is given, found there afterwards
    assert shim.is_relative_to(tmp_path) and blas_shim.shim(tmp_path) == shim
    env, described = blas_preload_env(str(shim), os.environ)
    assert described.startswith("openblas")
    code = (
        "import mlx.core as mx, numpy as np\n"
        "from fusebench.measure.machine.env import loaded_blas\n"
        "a = mx.random.normal((64, 48), key=mx.random.key(1))\n"
        "b = mx.random.normal((48, 32), key=mx.random.key(2))\n"
        "err = float(np.abs(np.array(a @ b) - np.array(a) @ np.array(b)).max())\n"
        "print(loaded_blas()); print(err)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    label, err = done.stdout.strip().splitlines()
    assert label.startswith("openblas") and str(shim) in label
    assert float(err) < 1e-4


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def test_a_killed_runs_reference_tree_is_removed_with_its_worktree_record(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    killed = tmp_path / "fusebench-ref-killed"
    killed.mkdir()
    _git("worktree", "add", "--detach", "--force", str(killed / "tree"), "HEAD")
    (killed / "owner.pid").write_text(str(_dead_pid()))
    running = tmp_path / "fusebench-ref-running"
    running.mkdir()
    (running / "owner.pid").write_text(str(os.getpid()))

    assert builds.remove_abandoned_trees() == [killed]
    assert not killed.exists() and running.exists()
    assert str(killed / "tree") not in _git("worktree", "list", "--porcelain")


def _setup_in(folder: Path, python: str) -> subprocess.CompletedProcess:
    """setup.sh alone in a scratch folder: its checks run before it installs anything."""
    shutil.copy(ROOT / "setup.sh", folder / "setup.sh")
    env = {**os.environ, "PYTHON": python}
    return subprocess.run(
        ["bash", str(folder / "setup.sh")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_setup_names_a_missing_python_in_one_line(tmp_path):
    done = _setup_in(tmp_path, "/nonexistent/python3")
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "no /nonexistent/python3 on the path" in done.stderr and "python3-venv" in done.stderr


def test_setup_names_a_missing_venv_module_in_one_line(tmp_path):
    # A Python whose venv cannot be made, as on Debian/Ubuntu without the python3-venv package.
    fake = tmp_path / "python3"
    fake.write_text(
        f'#!/bin/sh\n[ "$1" = "-m" ] && [ "$2" = venv ] && exit 1\nexec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    done = _setup_in(tmp_path, str(fake))
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "apt-get install python3-venv" in done.stderr and not (tmp_path / ".venv").exists()
