"""The first code of every child process (a worker, a probe, a sampler, a nested run): it runs a
module of one fusebench tree, importing that tree alone.

    python -P launch.py ROOT MODULE [ARGS...]
    python -P launch.py ROOT -c CODE [ARGS...]

ROOT holds the build: a checkout, whose import packages are the folders its own pyproject.toml maps
(`[tool.setuptools] package-dir`: bench/ is `fusebench`, models/ `fusebench.models`), so a checkout
of another commit maps its own folders, or the folder an installed `fusebench` sits in. `-P` keeps
the folder the command runs in off sys.path: a child started from inside another checkout never
imports that checkout. Standard library only: it runs before anything of the tree is importable.
"""

from __future__ import annotations

import runpy
import sys
import tomllib
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path


def package_dirs(root: Path) -> dict[str, Path]:
    """The import packages a checkout maps to its folders in its pyproject.toml; {} where it maps
    none (an installed package, or a checkout from before the map, whose links do it)."""
    try:
        with open(root / "pyproject.toml", "rb") as file:
            mapped = tomllib.load(file)["tool"]["setuptools"]["package-dir"]
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return {}
    return {name: root / folder for name, folder in mapped.items() if name}


class TreeFinder:
    """Finds each mapped package in its folder, ahead of any installed fusebench; their modules
    are then found in their package's folder as usual."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        folder = self.dirs.get(name)
        if folder is None:
            return None
        init = folder / "__init__.py"
        if init.is_file():
            return spec_from_file_location(name, init, submodule_search_locations=[str(folder)])
        spec = ModuleSpec(name, None, is_package=True)  # a folder of data (experiments/)
        spec.submodule_search_locations = [str(folder)]
        return spec


def main() -> None:
    root, what, *args = sys.argv[1:]
    dirs = package_dirs(Path(root))
    if dirs:
        sys.meta_path.insert(0, TreeFinder(dirs))
    else:
        sys.path.insert(0, root)
    if what == "-c":
        code, *args = args
        sys.argv = ["-c", *args]
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
        return
    sys.argv = [what, *args]
    runpy.run_module(what, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
