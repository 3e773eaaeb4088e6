"""Models named by Hugging Face repo id (`org/name`, optionally `@revision`), found the way mlx-lm
finds them: through huggingface_hub's cache, which honours HF_HOME, HF_HUB_CACHE and
HF_HUB_OFFLINE. A repo already in the cache loads offline; one that is not is downloaded into that
cache (huggingface_hub's progress bars) where the network allows, with the files mlx-lm's `load`
fetches; offline, it is one line naming the repo and the command that would fetch it. The snapshot's
folder name is its commit hash: the run header records it beside the repo id, so a result names
exactly which weights ran."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..core.errors import UserError
from ..core.experiment import Experiment, ModelSpec
from ..core.model_entry import REPO_ID

# mlx-lm's DEFAULT_ALLOW_PATTERNS (mlx_lm.utils): what its `load` downloads.
ALLOW_PATTERNS = [
    "*.json",
    "model*.safetensors",
    "*.py",
    "tokenizer.model",
    "*.tiktoken",
    "tiktoken.model",
    "*.txt",
    "*.jsonl",
    "*.jinja",
]


class RepoNotFound(UserError):
    """A repo id that is neither in the cache nor to be had: one line, exit 2."""


@dataclass(frozen=True)
class Snapshot:
    """A repo's files in the cache: the repo id as written, its commit, and its folder."""

    repo: str
    commit: str
    path: str


def is_repo_id(text: str) -> bool:
    """`org/name` or `org/name@rev`, and not a folder that exists here (a path wins)."""
    return bool(REPO_ID.fullmatch(text)) and not Path(text).exists()


def resolve(repo: str) -> Snapshot:
    """The snapshot folder of `repo` (`org/name[@revision]`), downloaded first if it is not cached
    and the hub can be reached."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    name, _, revision = repo.partition("@")
    try:
        folder = snapshot_download(name, revision=revision or None, allow_patterns=ALLOW_PATTERNS)
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the hub cannot be reached"
        raise RepoNotFound(
            f"model {repo}: not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {why}; "
            f"fetch it where the network allows with: hf download {name}"
            + (f" --revision {revision}" if revision else "")
        ) from None
    except (HfHubHTTPError, OSError) as err:
        raise RepoNotFound(f"model {repo}: {str(err).splitlines()[0]}") from None
    return Snapshot(repo=repo, commit=Path(folder).name, path=str(folder))


def found(model: ModelSpec) -> ModelSpec:
    """A repo model with its snapshot folder and commit; any other model as it is."""
    if model.repo is None or model.path is not None:
        return model
    snapshot = resolve(model.repo)
    return replace(model, path=snapshot.path, commit=snapshot.commit)


def with_repos_found(exp: Experiment) -> Experiment:
    """The experiment with each repo model's snapshot found (downloaded where it must be)."""
    return replace(exp, models=tuple(found(model) for model in exp.models))
