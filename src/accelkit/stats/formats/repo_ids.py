"""Datasets named as LeRobot names them: `owner/name`, found where LeRobot keeps its downloads.

A dataset argument that is not an existing path but looks like a repo id (`lerobot/pusht`) is
looked up, without any network, in the two places LeRobot itself reads (its source, read for
0.4.4 and 0.6.1):

1. `$HF_LEROBOT_HOME/<owner>/<name>`: every LeRobot version's default `root`; LeRobot 0.4 also
   downloads there (`snapshot_download(repo_id, repo_type="dataset", local_dir=root)`).
2. `$HF_LEROBOT_HOME/hub/datasets--<owner>--<name>/snapshots/<commit>/`: LeRobot 0.6's
   revision-safe cache (`snapshot_download(..., cache_dir=HF_LEROBOT_HOME / "hub",
   revision="v3.0")` when no root is given), the commit being the one `refs/v3.0` names, as
   huggingface_hub resolves a revision offline. (The system-wide `$HF_HUB_CACHE` is not read:
   LeRobot does not read it either; give such a snapshot by its path.)

`HF_LEROBOT_HOME` defaults to `$HF_HOME/lerobot`, and `HF_HOME` to `$XDG_CACHE_HOME/huggingface`,
else `~/.cache/huggingface` (huggingface_hub's `constants.HF_HOME`: `~` and `$VARS` expanded).
Both are read when a name is resolved, not when this module is imported.

A repo id is checked as the hub checks it (huggingface_hub's `validate_repo_id`: ASCII letters,
digits, `-`, `_`, `.`; each part 1 to 96 characters, starting and ending with a letter, digit or `_`;
no `--` or `..`; not ending in `.git`) before it becomes part of a path, so no name can leave
the cache (`../x`, `/etc`, `a/../../b`); a `refs/` file must name a 40-digit commit for the same
reason.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from accelkit.errors import DataError, InputError

REVISION = "v3.0"  # LeRobot's CODEBASE_VERSION: the revision it downloads by default (0.4, 0.6)
_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]{0,94}[A-Za-z0-9_])?")
_COMMIT = re.compile(r"[0-9a-f]{40}")


def hf_home() -> Path:
    """huggingface_hub's HF_HOME, from the environment as it is now."""
    default = os.path.join(os.getenv("XDG_CACHE_HOME", os.path.join("~", ".cache")), "huggingface")
    return Path(os.path.expandvars(os.path.expanduser(os.getenv("HF_HOME", default))))


def lerobot_home() -> Path:
    """LeRobot's HF_LEROBOT_HOME: $HF_LEROBOT_HOME, else $HF_HOME/lerobot."""
    return Path(os.getenv("HF_LEROBOT_HOME", str(hf_home() / "lerobot"))).expanduser()


def looks_like_repo_id(text: str) -> bool:
    """`owner/name`: one slash between two non-empty parts, not a URI, not an absolute or
    home-relative path, not `./x` (those are paths, whatever they hold)."""
    if "://" in text or "\\" in text or text.startswith(("/", "~", "./")):
        return False
    owner, slash, name = text.partition("/")
    return bool(slash and owner and name and "/" not in name)


def repo_id_problem(repo_id: str) -> str | None:
    """Why `repo_id` is not a valid `owner/name` on the hub, or None."""
    owner, _, name = repo_id.partition("/")
    for part in (owner, name):
        if not _PART.fullmatch(part):
            return (
                f"{part!r} must be 1 to 96 ASCII letters, digits, '-', '_' or '.', starting and"
                " ending with a letter, digit or '_'"
            )
    if "--" in repo_id or ".." in repo_id:
        return "'--' and '..' are not allowed in a repo id"
    if repo_id.endswith(".git"):
        return "a repo id cannot end in '.git'"
    return None


def places(repo_id: str) -> tuple[Path, Path]:
    """Where LeRobot keeps `repo_id` (valid): its root folder, and its hub-cache folder."""
    home = lerobot_home()
    owner, _, name = repo_id.partition("/")
    return home / owner / name, home / "hub" / f"datasets--{owner}--{name}"


def _is_dataset(folder: Path) -> bool:
    return (folder / "meta" / "info.json").is_file()


def _snapshot(cache: Path) -> Path | None:
    """The snapshot `refs/<REVISION>` names in a hub-cache folder, or None."""
    ref = cache / "refs" / REVISION
    if not ref.is_file():
        return None
    commit = ref.read_text(encoding="utf-8", errors="replace").strip()
    if not _COMMIT.fullmatch(commit):
        raise DataError(
            f"{ref} should name a 40-digit commit, not {commit[:60]!r}; the cache is damaged:"
            f" remove {cache} and download the dataset again"
        )
    snapshot = cache / "snapshots" / commit
    return snapshot if _is_dataset(snapshot) else None


def resolve(text: str, what: str = "dataset") -> str:
    """`text` itself when it is an existing path, a URI or not shaped like a repo id; the folder
    LeRobot keeps a repo id in otherwise. Not found, or not a valid repo id: `InputError`, one
    line naming where it looked and how to download it with LeRobot."""
    text = str(text)
    if not looks_like_repo_id(text) or Path(text).expanduser().exists():
        return text
    problem = repo_id_problem(text)
    if problem is not None:
        raise InputError(f"{what} {text!r} is not a path, and not a valid repo id: {problem}")
    root, cache = places(text)
    if _is_dataset(root):
        return str(root)
    snapshot = _snapshot(cache) if cache.is_dir() else None
    if snapshot is not None:
        return str(snapshot)
    home = lerobot_home()
    raise InputError(
        f"{what} {text!r} is not a path, and LeRobot's cache does not hold it: looked in {root}"
        f" and {cache / 'snapshots'} (refs/{REVISION}), under HF_LEROBOT_HOME={home}; download"
        f' it with LeRobot (python -c "from lerobot.datasets.lerobot_dataset import'
        f" LeRobotDataset; LeRobotDataset('{text}')\"), or give the dataset's folder"
    )
