"""The layers of bench/ and the rule their imports follow, checked on the source itself; and the
commands that only read results, checked to never load mlx."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import cell, trials
from conftest import results_file as write_results

ROOT = Path(__file__).resolve().parent.parent

# Which packages each layer may import from (itself always). Read top to bottom: records and spec at
# the bottom, statistics above them, views above those, measuring beside them, commands on top.
ALLOWED = {
    "fusebench.core": {"fusebench.models.config", "fusebench.models.errors"},
    "fusebench.analysis": {"fusebench.core", "fusebench.models.config", "fusebench.models.errors"},
    "fusebench.present": {
        "fusebench.analysis",
        "fusebench.core",
        "fusebench.models.config",
        "fusebench.models.errors",
        "fusebench.models.registry",
    },
    # The runner prints progress with numbers formatted as everywhere else: the one view module it
    # may use.
    "fusebench.measure": {
        "fusebench.analysis",
        "fusebench.core",
        "fusebench.present.format",
        "fusebench.models",
    },
    "fusebench.commands": {"fusebench"},
    "fusebench.models": set(),
    # the package itself and `python -m fusebench`: entry points to the commands (last: every module
    # is inside it)
    "fusebench": {"fusebench.commands"},
}
# Third-party packages a layer must never load: mlx is slow to import, and reading results never
# needs it.
FORBIDDEN = {
    "fusebench.core": {"mlx", "mlx_lm", "rich", "matplotlib"},
    "fusebench.analysis": {"mlx", "mlx_lm", "rich", "matplotlib"},
    "fusebench.present": {"mlx", "mlx_lm"},
}
# models/ modules that must stay free of mlx, because the layers above read them without loading the
# model.
LIGHT_MODELS = ("fusebench.models.config", "fusebench.models.errors", "fusebench.models.registry")


def module_name(path: Path) -> str:
    """The name a file imports as: bench/ is `fusebench`, models/ `fusebench.models`."""
    folder, *parts = path.relative_to(ROOT).with_suffix("").parts
    parts = ["fusebench", *(["models"] if folder == "models" else []), *parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_path(module: str) -> Path:
    """Where a module of the tree lies, without its suffix: module_name turned around."""
    _, *parts = module.split(".")
    folder = "models" if parts[:1] == ["models"] else "bench"
    return ROOT.joinpath(folder, *parts[folder == "models" :])


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


SOURCES = sorted(path for folder in ("bench", "models") for path in (ROOT / folder).rglob("*.py"))


def test_no_link_in_the_tree():
    """pyproject.toml maps the folders to `fusebench`: a link would give a module two paths and
    break a checkout where links are not supported."""
    links = [
        path.relative_to(ROOT)
        for top in ROOT.iterdir()
        if not top.name.startswith(".") and top.is_dir() and not top.is_symlink()
        for path in top.rglob("*")
        if path.is_symlink()
    ] + [top.relative_to(ROOT) for top in ROOT.iterdir() if top.is_symlink()]
    assert not links


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
    ours = [m for m in imports(path) if m.split(".")[0] == "fusebench"]
    wrong = [m for m in ours if not within(m, {layer, *ALLOWED[layer]}) and m != "fusebench"]
    # `from ..x import y` also names y as a module candidate; only real modules or packages count.
    wrong = [
        m for m in wrong if module_path(m).with_suffix(".py").exists() or module_path(m).is_dir()
    ]
    assert not wrong, f"{me} ({layer}) imports {wrong}"
    banned = [m for m in imports(path) if m.split(".")[0] in FORBIDDEN.get(layer, set())]
    assert not banned, f"{me} ({layer}) imports {banned}"


@pytest.mark.parametrize("module", LIGHT_MODELS)
def test_light_model_modules_do_not_import_mlx(module: str):
    path = module_path(module).with_suffix(".py")
    assert not [m for m in imports(path) if m.split(".")[0] in ("mlx", "mlx_lm")]


def loaded_after(argv: list[str], cwd: Path) -> set[str]:
    """The top-level packages loaded by running `fusebench ARGV` in a fresh interpreter."""
    code = (
        "import sys, json\nfrom fusebench.commands import main\n"
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
    assert "fusebench" in loaded
    assert not {"bench", "models"} & loaded
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
    from fusebench.models.ops import REGISTRY  # with the built-in variants registered

    names = set(REGISTRY) | {"sdpa", "manual"}  # the ops, and the variant names only one op has
    found = {
        f"{path.relative_to(ROOT)}: {text!r}"
        for folder in ("bench/measure", "bench/present")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for text in _code_strings(path) & names
    }
    assert not found


def test_a_wheel_installs_one_package_and_every_module_in_it(tmp_path: Path):
    """`pip wheel .` installs `fusebench` alone at the top level (no `bench`, `models` or
    `benchmarks` to collide with a user's own packages), holding every module of bench/ and
    models/ under its import name, and the data files. Built from a copy: no build/ in the tree."""
    tree = tmp_path / "tree"
    for folder in ("bench", "models", "experiments"):
        shutil.copytree(ROOT / folder, tree / folder)
    for file in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / file, tree / file)
    pip_wheel = [sys.executable, "-m", "pip", "wheel", str(tree), "--no-deps", "--quiet"]
    subprocess.run(
        [*pip_wheel, "--no-build-isolation", "--wheel-dir", str(tmp_path / "wheel")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    names = set(zipfile.ZipFile(next((tmp_path / "wheel").glob("*.whl"))).namelist())
    assert {name.split("/")[0] for name in names} - {"fusebench"} == {
        next(n.split("/")[0] for n in names if ".dist-info/" in n)
    }

    def in_wheel(path: Path) -> bool:
        stem = module_name(path).replace(".", "/")
        return f"{stem}.py" in names or f"{stem}/__init__.py" in names

    missing = [module_name(path) for path in SOURCES if not in_wheel(path)]
    assert missing == []
    assert "fusebench/models/presets/e2b.yaml" in names
    assert "fusebench/experiments/default.yaml" in names


# What opening a file or a store looks like in code: analysis/ is given what it judges (its
# readers live above it, commands/sources.py and commands/gate_session.py).
OPENING = {
    "open", "read_text", "read_bytes", "write_text", "write_bytes", "is_file", "exists", "glob",
    "rglob", "read_results", "HistoryStore", "safe_load", "json.load", "json.loads",
}  # fmt: skip


@pytest.mark.parametrize(
    "path", sorted((ROOT / "bench" / "analysis").glob("*.py")), ids=lambda p: p.name
)
def test_the_analysis_opens_no_file_and_no_store(path: Path):
    calls = [
        node.func for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
    ]
    names = {ast.unparse(f).rpartition(".")[2] for f in calls} | {ast.unparse(f) for f in calls}
    assert not names & OPENING, f"{path.name} calls {sorted(names & OPENING)}"


LONG_MODULE_LINES = 600


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_long_module_says_why_it_is_one(path: Path):
    text = path.read_text()
    if len(text.splitlines()) > LONG_MODULE_LINES:
        assert "Why one long module:" in (ast.get_docstring(ast.parse(text)) or "")


def test_no_class_name_is_declared_twice():
    """One name per concept: each class name of bench/ and models/ is declared in one module
    (docs/architecture.md, "Names")."""
    declared: dict[str, list[str]] = {}
    for path in [*(ROOT / "bench").rglob("*.py"), *(ROOT / "models").rglob("*.py")]:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                declared.setdefault(node.name, []).append(module_name(path))
    twice = {name: modules for name, modules in declared.items() if len(modules) > 1}
    assert not twice


def _calls_in_order(path: Path, function: str) -> list[str]:
    """The names `function` (a function or method of the module at `path`) calls, in the order
    of its source."""
    tree = ast.parse(path.read_text())
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
    calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    return [ast.unparse(c.func).rpartition(".")[2] for c in calls]


@pytest.mark.parametrize(
    ("heading", "module", "function"),
    [
        ("The machine's choices", "bench/measure/run/runner.py", "run_experiment"),
        ("One cell", "bench/measure/run/cellrun.py", "run"),
    ],
)
def test_the_architecture_pictures_follow_the_code(heading: str, module: str, function: str):
    """Each picture of docs/architecture.md names the calls of a function in their order."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    picture = text[text.index(heading) :].split("```")[1]
    drawn = re.findall(r"^(?:→ )?(\w+)\(", picture, re.MULTILINE)
    calls = _calls_in_order(ROOT / module, function)
    assert len(drawn) >= 5 and set(drawn) <= set(calls), set(drawn) - set(calls)
    assert [calls.index(name) for name in drawn] == sorted(calls.index(name) for name in drawn)


def test_a_cell_run_is_left_its_rounds():
    """CellRun drives a cell's rounds; its warm-ups, the fixing of its rounds, its fresh pairs,
    its op shares and the schedules' weighing are classes of their own (issue 66: at most 200
    lines; 240 since issue 76, the cell adopting what a weighing keeps and playing its rounds)."""
    tree = ast.parse((ROOT / "bench" / "measure" / "run" / "cellrun.py").read_text())
    (cell_run,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CellRun"]
    assert cell_run.end_lineno - cell_run.lineno + 1 <= 240
