"""Tools the tests share: one results-file factory, writing run headers and records as
`fusebench run` does (core.header.RunHeader through core.results.ResultsWriter), with the cell and
trial records it writes, and one way to run the `fusebench` CLI in a process of its own, as its user
runs it, or in this one where which process runs it does not matter (it loads no plugin, needs no
environment of its own, and the tree it runs is this one): the second of imports each call saves
adds up over the suite."""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from fusebench.commands import main
from fusebench.core.fileformat import utc_now
from fusebench.core.header import RunHeader
from fusebench.core.results import ResultsWriter
from fusebench.core.typed import from_mapping, to_record
from fusebench.measure.machine.env import own_compile_dir

ROOT = Path(__file__).resolve().parent.parent
# Tests that mx.compile in this process need what the CLI gives its workers: a compile folder this
# user owns, so the suite passes as a plain user after root has run it.
own_compile_dir()
TEST_ENV = {
    "fusebench": "0.1.0",
    "mlx": "0.32.4",
    "mlx_lm": "0.32.2",
    "python": "3.11.7",
    "backend": "cpu",
    "device": "Test CPU",
    "blas": "openblas (/usr/lib/libopenblas.so)",
    "cpu": "Test CPU",
    "cores": 4,
    "ram_bytes": 2**34,
    "os": "Linux",
    "hostname": "vm",
    "git_commit": "0123456789abcdef",
    "git_dirty": True,
}


@pytest.fixture
def registry() -> Iterator[Any]:
    """The op registry, and whatever a test declares or registers in it gone afterwards, so other
    tests see the built-in ops only."""
    from fusebench.models.ops import REGISTRY

    before = {op: (spec, dict(spec.variants)) for op, spec in REGISTRY.items()}
    yield REGISTRY
    REGISTRY.clear()
    for op, (spec, variants) in before.items():
        spec.variants.clear()
        spec.variants.update(variants)
        REGISTRY[op] = spec


def fusebench_command(tree: Path = ROOT) -> list[str]:
    """The command that runs `fusebench` of the tree at `tree` (this one, or a tree_copy), started
    as the product starts its workers (bench/measure/launch.py)."""
    from fusebench.measure.machine.env import child_command

    return child_command("fusebench", root=tree)


def fusebench(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`fusebench ARGS` in a process of its own, run in `cwd`: registries, plugins and imports stay
    in that process. Its code is the tree at `cwd` where `cwd` holds one (a tree_copy), else this
    tree's, through the tree's launcher (as a worker is started)."""
    tree = cwd if (cwd / "bench" / "measure" / "launch.py").is_file() else ROOT
    return subprocess.run(
        [*fusebench_command(tree), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tree_copy(dest: Path, patch: tuple[str, str] | None = None, file: str = "worker.py") -> Path:
    """A copy of this fusebench tree (bench/, models/, experiments/ and the pyproject.toml that
    maps them to `fusebench`), with one replacement in bench/measure/`file`: faults and slowdowns
    go into throwaway copies, never through hooks in the product. `fusebench` run in the copy
    (`fusebench(..., cwd=copy)`), and the workers it starts, run the copy's code."""
    for part in ("bench", "models", "experiments"):
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    if patch:
        changed = dest / "bench" / "measure" / file
        text = changed.read_text()
        assert patch[0] in text
        changed.write_text(text.replace(patch[0], patch[1], 1))
    return dest


def fusebench_here(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`fusebench ARGS` run in `cwd` by this process: the exit code and what it printed, as
    `fusebench` gives them."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        contextlib.chdir(cwd),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            code = main(list(args))
        except SystemExit as usage:  # argparse's own usage errors
            code = usage.code
    return subprocess.CompletedProcess(
        ["fusebench", *args], code, stdout.getvalue(), stderr.getvalue()
    )


def cell(
    size: str = "E2B (2/35 layers)",
    *,
    run_id: str = "run1",
    prompt: int = 128,
    gen: int = 4,
    batch: int = 1,
    key: str | None = None,
) -> dict[str, Any]:
    """The fields a trial record carries for its cell."""
    model = size.split()[0].lower()
    model_key = key or f"{model}:layers=2:float32:none"
    workload = f"pp{prompt} tg{gen} b{batch}"
    return {
        "run_id": run_id,
        "cell": f"{model_key}|{workload}",
        "model": model,
        "model_key": model_key,
        "size": size,
        "layers": 2,
        "dtype": "float32",
        "quantize": None,
        "prompt_tokens": prompt,
        "gen_tokens": gen,
        "batch": batch,
        "workload": workload,
    }


def trials(
    of: Mapping[str, Any],
    throughputs: Mapping[str, Sequence[tuple[float, float | None]]],
    **extra: Any,
) -> list[dict[str, Any]]:
    """One timed trial per variant per round: `throughputs[variant][round]` is (prefill tok/s, gen
    tok/s)."""
    return [
        {
            "kind": "trial",
            **of,
            "variant": variant,
            "round": round_,
            "warmup": False,
            "prefill_tps": prefill,
            "gen_tps": gen,
            **extra,
        }
        for variant, values in throughputs.items()
        for round_, (prefill, gen) in enumerate(values)
    ]


def header(
    run_id: str,
    experiment: str,
    *,
    env: Mapping[str, Any] | None = None,
    file: str = "experiment.yaml",
    name: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The run header today's writer writes: `experiment` is the YAML it stores, as read from
    `file`, and `name` the experiment's (by default the YAML's; `fusebench ops` names its runs
    "ops")."""
    stored = {
        "name": name or yaml.safe_load(experiment)["name"],
        "file": file,
        "sha256": hashlib.sha256(experiment.encode()).hexdigest(),
        "content": experiment,
    }
    fields = {"run_id": run_id, "experiment": stored, "env": env or TEST_ENV, **extra}
    return to_record(from_mapping(RunHeader, {"started_at": utc_now(), **fields}))


def write_records(path: Path, records: Iterable[Mapping[str, Any]]) -> Path:
    """`records` as a results file, written as the runner writes them (run headers from
    `header`)."""
    # the writer appends, as a resumed run does; a factory's file starts anew
    path.unlink(missing_ok=True)
    with ResultsWriter(path) as writer:
        for record in records:
            writer.write(dict(record))
    return path


def results_file(
    path: Path,
    records: Iterable[Mapping[str, Any]],
    *,
    experiment: str,
    run_id: str = "run1",
    env: Mapping[str, Any] | None = None,
    file: str = "experiment.yaml",
    **extra: Any,
) -> Path:
    """A results file of one run: its header (see `header`), then `records`."""
    return write_records(path, [header(run_id, experiment, env=env, file=file, **extra), *records])


# A toy config every mlx-lm Llama-style architecture reads (each test adds its model_type).
SMALL_MLX_LM = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "max_position_embeddings": 256,
}


def save_mlx_lm_checkpoint(model: Any, path: Path, *, quantize: bool = False) -> Path:
    """An mlx-lm checkpoint of a fusebench.models.switched.SwitchedModel, as mlx-lm's own classes
    write it (4-bit, group 32, when asked)."""
    from mlx_lm.utils import quantize_model, save_config, save_model

    config = dict(model.config)
    if quantize:
        _, config = quantize_model(model.model, config, 32, 4)
    save_model(path, model.model)
    save_config(config, path / "config.json")
    return path
