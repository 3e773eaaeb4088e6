"""One entry of an experiment file's `models:` list, read from its YAML node (core.nodes): a
bundled preset (at one or several depths), a checkpoint directory or a Hugging Face repo, at a
dtype and quantization. core.spec reads the list with it.
"""

from __future__ import annotations

import os
import re
from functools import partial

from yaml.nodes import Node

from fusebench.models.config import DTYPES, IMPLEMENTATIONS, QUANTIZE_MODES, preset_names

from . import nodes
from .experiment import DEFAULT_DTYPE, NO_QUANTIZE, ModelSpec, model_spec, preset_facts

MODEL_KEYS = ("preset", "path", "repo", "size", "layers", "dtype", "quantize", "implementation")
# A Hugging Face repo id, `org/name` or `org/name@revision` (measure.hub resolves it).
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?")


def model_entry(node: Node, field: str, check_paths: bool) -> list[ModelSpec]:
    """One model entry: one model, or one per depth when `layers` lists several."""
    items = nodes.mapping(node, field, MODEL_KEYS)
    given = [key for key in ("preset", "path", "repo") if key in items]
    if len(given) > 1:
        second = max((items[key][0] for key in given), key=lambda key: key.start_mark.index)
        nodes.fail(second, field, "give one of a preset, a path or a repo, not several")
    repo = None
    if "preset" in items:
        preset = nodes.choice(
            items["preset"][1], nodes.join(field, "preset"), preset_names(), "preset"
        )
        path, depths = None, _preset_layers(items, field, preset)
    elif "path" in items:
        preset, path, depths = None, _checkpoint(items, field, check_paths), (None,)
    elif "repo" in items:
        preset, path, depths = None, None, (None,)
        repo = _repo(items, field)
    else:
        nodes.fail(
            node,
            field,
            f"give a preset (one of {nodes.listed(preset_names())}), a path to a checkpoint "
            "directory, or a Hugging Face repo id (repo: org/name)",
        )
    size = nodes.optional(items, "size", field, nodes.text, None)
    dtype = nodes.optional(
        items,
        "dtype",
        field,
        partial(nodes.choice, choices=list(DTYPES), what="dtype"),
        DEFAULT_DTYPE,
    )
    quantize = nodes.optional(items, "quantize", field, _quantize, None)
    implementation = nodes.optional(items, "implementation", field, _implementation, None)
    return [
        model_spec(
            preset=preset,
            path=path,
            size=size,
            layers=layers,
            dtype=dtype,
            quantize=quantize,
            implementation=implementation,
            repo=repo,
        )
        for layers in depths
    ]


def _preset_layers(items: nodes.Items, field: str, preset: str) -> tuple[int | None, ...]:
    """`layers`: a depth or a list of distinct depths, each 1..the preset's layers; absent, all of
    them (None)."""
    _, max_layers, fewest = preset_facts(preset)

    def depth(node: Node, where: str) -> int:
        layers = nodes.integer(node, where)
        if not fewest <= layers <= max_layers:
            nodes.fail(
                node,
                where,
                f"{layers} is out of range; choose {fewest}..{max_layers} "
                f"({preset} has {max_layers})",
            )
        return layers

    return nodes.optional(
        items, "layers", field, partial(nodes.int_values, read=depth, allow_empty=False), (None,)
    )


def _checkpoint(items: nodes.Items, field: str, check_paths: bool) -> str:
    path_node = items["path"][1]
    # Absolute: workers run in their build's checkout, not in the directory the user named it from.
    path = os.path.abspath(os.path.expanduser(nodes.text(path_node, nodes.join(field, "path"))))
    if check_paths and not os.path.isdir(path):
        problem = "is not a directory" if os.path.exists(path) else "does not exist"
        nodes.fail(
            path_node, nodes.join(field, "path"), f"{path!r} {problem}; give a checkpoint directory"
        )
    _runs_whole(items, field, "a checkpoint at `path`")
    return path


def _runs_whole(items: nodes.Items, field: str, what: str) -> None:
    """`layers` truncates presets only: a checkpoint runs as it was saved."""
    if "layers" in items:
        nodes.fail(
            items["layers"][0], nodes.join(field, "layers"), f"only for presets; {what} runs whole"
        )


def _repo(items: nodes.Items, field: str) -> str:
    node = items["repo"][1]
    repo = nodes.text(node, nodes.join(field, "repo"))
    if not REPO_ID.fullmatch(repo):
        nodes.fail(
            node, nodes.join(field, "repo"), f"{repo!r} is not a repo id; give org/name[@revision]"
        )
    _runs_whole(items, field, "a checkpoint from a repo")
    return repo


def _implementation(node: Node, field: str) -> str:
    return nodes.choice(node, field, list(IMPLEMENTATIONS), "implementation")


def _quantize(node: Node, field: str) -> str | None:
    mode = nodes.choice(node, field, [NO_QUANTIZE, *QUANTIZE_MODES], "quantize mode")
    return None if mode == NO_QUANTIZE else mode
