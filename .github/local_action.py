"""Runs action.yml's steps on this machine, as GitHub's runner runs a composite action: in a folder
(a scratch checkout of the project that uses the action), with the inputs given here or their
defaults, GITHUB_ACTION_PATH at this checkout, and RUNNER_TEMP, GITHUB_STEP_SUMMARY, GITHUB_OUTPUT
and GITHUB_PATH as files the steps write. `uses:` steps are named and skipped (nothing here runs
another action); `if: always()` steps run after a failure, others stop there.

    python3 .github/local_action.py --in /tmp/scratch --input against-env="mlx[cpu]==0.32.3" \\
        --input flags="--model tiny --op softcap=unfused,compiled"
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ACTION = Path(__file__).resolve().parents[1] / "action.yml"
EXPRESSION = re.compile(r"\$\{\{\s*([\w.-]+)\s*\}\}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in", dest="workdir", type=Path, required=True)
    parser.add_argument("--input", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    action = yaml.safe_load(ACTION.read_text())
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    inputs.update(dict(item.split("=", 1) for item in args.input))
    temp = Path(tempfile.mkdtemp(prefix="runner-"))
    files = {name: temp / name for name in ("summary.md", "output", "path")}
    for file in files.values():
        file.touch()
    outputs: dict[str, dict[str, str]] = {}
    failed = False
    for step in action["runs"]["steps"]:
        name = step.get("name", step.get("uses"))
        if "uses" in step:
            print(f"== {name}: skipped here (uses {step['uses']})")
            continue
        if failed and "always()" not in str(step.get("if", "")):
            print(f"== {name}: skipped (an earlier step failed)")
            continue

        def value(match: re.Match) -> str:
            kind, _, rest = match.group(1).partition(".")
            if kind == "inputs":
                return inputs[rest]
            step_id, _, key = rest.partition(".outputs.")
            return outputs.get(step_id, {}).get(key, "")

        env = {key: EXPRESSION.sub(value, str(text)) for key, text in step.get("env", {}).items()}
        extra_path = files["path"].read_text().split()
        env = {
            **os.environ,
            **env,
            "GITHUB_ACTION_PATH": str(ACTION.parent),
            "RUNNER_TEMP": str(temp),
            "GITHUB_STEP_SUMMARY": str(files["summary.md"]),
            "GITHUB_OUTPUT": str(files["output"]),
            "GITHUB_PATH": str(files["path"]),
            "PATH": os.pathsep.join([*extra_path, os.environ["PATH"]]),
        }
        files["output"].write_text("")
        print(f"== {name}", flush=True)
        done = subprocess.run(
            ["bash", "-e", "-c", EXPRESSION.sub(value, step["run"])], cwd=args.workdir, env=env
        )
        lines = files["output"].read_text().splitlines()
        outputs[step.get("id", "")] = dict(line.split("=", 1) for line in lines if "=" in line)
        if done.returncode != 0:
            print(f"== {name}: exit {done.returncode}")
            failed = True
    print(f"== job summary ({files['summary.md']}):\n{files['summary.md'].read_text()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
