"""The layers of bench/ and the rule their imports follow, checked on the source itself; and the
commands that only read results, checked to never load mlx."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cell, trials
from conftest import results_file as write_results

ROOT = Path(__file__).resolve().parent.parent

# Which packages each layer may import from (itself always). Read top to bottom: records and spec at
# the bottom, statistics above them, views above those, measuring beside them, commands on top.
ALLOWED = {
    "bench.core": {"models.config", "models.errors"},
    "bench.analysis": {"bench.core", "models.config", "models.errors"},
    "bench.present": {
        "bench.analysis",
        "bench.core",
        "models.config",
        "models.errors",
        "models.registry",
    },
    # The runner prints progress with numbers formatted as everywhere else: the one view module it
    # may use.
    "bench.measure": {"bench.analysis", "bench.core", "bench.present.format", "models"},
    "bench.commands": {"bench", "models"},
    "models": set(),
    # the package itself and `python -m bench`: entry points to the commands
    "bench": {"bench.commands"},
}
# Third-party packages a layer must never load: mlx is slow to import, and reading results never
# needs it.
FORBIDDEN = {
    "bench.core": {"mlx", "mlx_lm", "rich", "matplotlib"},
    "bench.analysis": {"mlx", "mlx_lm", "rich", "matplotlib"},
    "bench.present": {"mlx", "mlx_lm"},
}
# models/ modules that must stay free of mlx, because the layers above read them without loading the
# model.
LIGHT_MODELS = ("models.config", "models.errors", "models.registry")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports too), relative ones
    resolved."""
    package = (
        module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    )
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def layer_of(module: str) -> str | None:
    return next(
        (layer for layer in ALLOWED if module == layer or module.startswith(layer + ".")), None
    )


def within(module: str, packages: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


SOURCES = sorted([*(ROOT / "bench").rglob("*.py"), *(ROOT / "models").rglob("*.py")])


def import_graph() -> dict[str, set[str]]:
    """Each module of the tree and the modules of the tree it imports (TYPE_CHECKING ones too: a
    reader follows them as well)."""
    modules = {module_name(path): path for path in SOURCES}

    def owner(name: str) -> str | None:  # `from .x import f`: f is no module, x is
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    return {
        me: {found for name in imports(path) if (found := owner(name)) not in (None, me)}
        for me, path in modules.items()
    }


def test_no_two_modules_import_each_other_by_any_path():
    graph, cycles = import_graph(), []
    for start in graph:
        seen, stack = {start}, [(start, [start])]
        while stack:
            module, path = stack.pop()
            for imported in graph[module]:
                if imported == start:
                    cycles.append(" -> ".join([*path, start]))
                elif imported not in seen:
                    seen.add(imported)
                    stack.append((imported, [*path, imported]))
    assert cycles == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layers(path: Path):
    me = module_name(path)
    layer = layer_of(me)
    assert layer, f"{me} belongs to no layer"
    ours = [m for m in imports(path) if m.split(".")[0] in ("bench", "models")]
    wrong = [
        m for m in ours if not within(m, {layer, *ALLOWED[layer]}) and m not in ("bench", "models")
    ]
    # `from ..x import y` also names y as a module candidate; only real modules or packages count.
    wrong = [
        m
        for m in wrong
        if (ROOT / m.replace(".", "/")).with_suffix(".py").exists()
        or (ROOT / m.replace(".", "/")).is_dir()
    ]
    assert not wrong, f"{me} ({layer}) imports {wrong}"
    banned = [m for m in imports(path) if m.split(".")[0] in FORBIDDEN.get(layer, set())]
    assert not banned, f"{me} ({layer}) imports {banned}"


@pytest.mark.parametrize("module", LIGHT_MODELS)
def test_light_model_modules_do_not_import_mlx(module: str):
    path = ROOT / (module.replace(".", "/") + ".py")
    assert not [m for m in imports(path) if m.split(".")[0] in ("mlx", "mlx_lm")]


def loaded_after(argv: list[str], cwd: Path) -> set[str]:
    """The top-level packages loaded by running `fusebench ARGV` in a fresh interpreter."""
    code = (
        "import sys, json\nfrom bench.commands import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


EXPERIMENT = (
    "name: t\nmodels: [{preset: tiny}]\nvariants: {a: {}, b: {geglu: compiled}}\n"
    "comparisons: [[a, b]]\nworkloads: {prompt_tokens: 8, gen_tokens: 2}\n"
    "expect: [{all_correct: true}]\n"
)


@pytest.fixture(scope="module")
def results_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    of = cell("tiny", prompt=8, gen=2, key="tiny")
    records = trials(
        of,
        {v: [(100.0 + r + (5 if v == "b" else 0), 10.0 + r / 10) for r in range(4)] for v in "ab"},
    )
    records.append(
        {
            "kind": "correctness",
            **of,
            "variant": "b",
            "reference": "a",
            "max_abs_err": 0.0,
            "max_rel_err": 0.0,
            "tokens_checked": 2,
            "tokens_agree": 2,
            "atol": 0.01,
            "passed": True,
        }
    )
    return write_results(
        tmp_path_factory.mktemp("results") / "r.jsonl",
        records,
        experiment=EXPERIMENT,
        file="t.yaml",
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["report", "--help"],
        ["check", "--help"],
        ["run", "--help"],
        ["kernels", "--help"],
        ["report", "RESULTS", "--out", "OUT"],
        ["check", "RESULTS"],
        ["baseline", "save", "RESULTS", "--name", "x"],
    ],
    ids=" ".join,
)
def test_commands_that_read_results_never_load_mlx(
    argv: list[str], results_file: Path, tmp_path: Path
):
    argv = [
        str(results_file) if a == "RESULTS" else str(tmp_path / "out") if a == "OUT" else a
        for a in argv
    ]
    loaded = loaded_after(argv, tmp_path)
    assert "bench" in loaded
    assert not {"mlx", "mlx_lm"} & loaded


def _code_strings(path: Path) -> set[str]:
    """The string constants of a module's code, docstrings left out (prose may name an op)."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    }


def test_no_op_is_special_cased_in_measuring_or_presenting():
    # An op's knowledge lives in its declaration (models/): what it probes, what its report says.
    from models.ops import REGISTRY  # with the built-in variants registered

    names = set(REGISTRY) | {"sdpa", "manual"}  # the ops, and the variant names only one op has
    found = {
        f"{path.relative_to(ROOT)}: {text!r}"
        for folder in ("bench/measure", "bench/present")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for text in _code_strings(path) & names
    }
    assert not found
