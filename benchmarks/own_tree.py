"""The fusebench of one tree, imported ahead of whatever the venv installed: bench/measure/
launch.py's finder over that tree's own pyproject.toml map, as every child process is started
(issue 77, item 5). Importing this module takes the tree it stands in:

    import own_tree  # first, before any fusebench import

and `use_tree(path)` another one (a script that measures the tree it is run from).
"""

from __future__ import annotations

import sys
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def use_tree(root: Path) -> None:
    """fusebench imported from `root` (a checkout) from now on, ahead of any other."""
    spec = spec_from_file_location("fusebench_launch", root / "bench" / "measure" / "launch.py")
    assert spec is not None and spec.loader is not None
    launch = module_from_spec(spec)
    spec.loader.exec_module(launch)
    sys.meta_path.insert(0, launch.TreeFinder(launch.package_dirs(root)))


use_tree(ROOT)
