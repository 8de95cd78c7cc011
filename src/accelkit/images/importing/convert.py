"""`import_model`: read the folder, export into a temporary folder beside the output, verify,
and rename it to the output at the end — an interrupted or refused import leaves nothing."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from accelkit.errors import InputError, require
from accelkit.images.importing.export import (
    CONFIG_FILE,
    EXPORTER,
    IMAGE_FILE,
    TEXT_FILE,
    config_yaml,
    export_towers,
    features,
    hf_model,
    hf_tokenizer,
    padding_rule,
    write_tokenizer,
)
from accelkit.images.importing.folder import (
    TOKENIZER,
    cache_repo,
    cache_snapshot,
    read_folder,
    snapshot_of_repo,
)
from accelkit.images.importing.verify import verify
from accelkit.runtime.progress import status

log = logging.getLogger(__name__)


def imported_models_dir() -> Path:
    """Where an import from a Hugging Face cache snapshot goes by default: `models/` in
    accelkit's data folder (platformdirs' user data dir, e.g. ~/.local/share/accelkit)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("accelkit")) / "models"


def default_output(folder: Path) -> Path:
    """PATH-accelkit beside the folder; for a Hugging Face cache snapshot (whose snapshots/
    `hf cache prune` deletes as a detached revision, what it did not download with it) a folder
    named after the repository and commit in `imported_models_dir()`, outside the cache."""
    snapshot = cache_snapshot(folder)
    if snapshot:
        repo, commit = snapshot
        return imported_models_dir() / f"{repo.replace('/', '--')}-{commit[:12]}"
    folder = folder.absolute()
    return folder.parent / f"{folder.name}-accelkit"


def _free_output(output: Path) -> None:
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise InputError(f"{output}: exists and is not a folder; choose another --output")
    if output.is_dir() and any(output.iterdir()):
        raise InputError(
            f"{output}: folder is not empty; choose another --output (a new or empty folder)"
        )
    if not output.parent.is_dir():
        raise InputError(
            f"{output.parent}: folder does not exist; create it or choose another --output"
        )


def cache_root_holding(target: Path, folder: Path) -> Path | None:
    """The Hugging Face cache folder `target` lies in — any cache repository's folder (what a
    revision's deletion or `hf cache prune` removes whole), or the cache `folder` was read from
    — else None."""
    repo = cache_repo(target)
    if repo is not None:
        return repo.parent
    source = cache_repo(folder)
    real = Path(os.path.realpath(target))
    if source is not None and real.is_relative_to(source.parent):
        return source.parent
    return None


def _snapshot_notes(plan, target: Path, folder: Path) -> list[str]:
    root = cache_root_holding(target, folder)
    notes = []
    if root is not None:
        inside = (
            f"{target} is INSIDE the Hugging Face cache {root}: `hf cache prune`, `hf cache"
            " delete` or huggingface_hub's delete_revisions can delete it with the repository it"
            " lies in; to keep it out of their reach, import with -o to a folder outside the cache"
        )
        log.warning(inside)
        notes.append(inside)
    if plan.snapshot is not None:
        repo, commit = plan.snapshot
        where = "INSIDE the cache" if root is not None else "outside the cache"
        notes.append(
            f"a Hugging Face cache snapshot of {repo} (commit {commit[:12]}): named"
            f" {plan.name!r}, written {where}"
        )
    return notes


def import_model(
    path: str | os.PathLike, output: str | os.PathLike | None = None
) -> dict[str, Any]:
    """Make a transformers CLIPModel or SiglipModel folder into the ONNX pair, tokenizer.json and
    YAML block accelkit's text search loads, verified against transformers' own outputs.
    Returns what was written and the checks' figures (`ImportReport`'s fields)."""
    require("torch", "images-import")
    folder = Path(path)
    folder = snapshot_of_repo(folder) or folder  # a cache repository: the snapshot refs/main names
    read_folder(folder)  # the folder's own refusals first, before transformers loads anything
    target = Path(output) if output is not None else default_output(folder)
    if output is None and cache_snapshot(folder):
        target.parent.mkdir(parents=True, exist_ok=True)
    _free_output(target)
    started = time.perf_counter()
    with status(f"importing {folder}: exporting both towers, checking them against transformers"):
        return _import(folder, target, started)


def _import(folder: Path, target: Path, started: float) -> dict[str, Any]:
    tokenizer = hf_tokenizer(folder)
    limit = tokenizer.model_max_length if tokenizer.model_max_length < 1_000_000 else None
    plan = read_folder(folder, limit)
    rule = padding_rule(tokenizer, plan)
    model = hf_model(folder)
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        export_towers(model, plan, temp, rule)
        write_tokenizer(tokenizer, rule, temp / TOKENIZER)
        import torch

        with torch.no_grad():
            probe = torch.zeros(1, 3, *plan.image_size)
            dim = int(features(model.get_image_features(pixel_values=probe)).shape[-1])
        (temp / CONFIG_FILE).write_text(config_yaml(plan, dim, rule))
        checks = verify(plan, model, tokenizer, temp / CONFIG_FILE)
        for name in (IMAGE_FILE, TEXT_FILE, TOKENIZER, CONFIG_FILE):
            with open(temp / name, "rb") as handle:
                os.fsync(handle.fileno())
        os.chmod(temp, 0o755)
        if target.is_dir():
            target.rmdir()  # empty, checked above
        os.rename(temp, target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return {
        "source": str(folder),
        "output": str(target),
        "kind": plan.kind,
        "name": plan.name,
        "files": {
            "image_encoder": str(target / IMAGE_FILE),
            "text_encoder": str(target / TEXT_FILE),
            "tokenizer": str(target / TOKENIZER),
            "config": str(target / CONFIG_FILE),
        },
        "preprocess": {
            "image_size": list(plan.image_size),
            "mean": list(plan.mean),
            "std": list(plan.std),
            "fit": plan.fit,
            "resample": plan.resample,
        },
        "text": {
            "context_length": plan.context_length,
            "pad_id": rule["pad_id"],
            "pad_token": rule["pad_token"],
            "padding_side": rule["side"],
            "truncation_side": rule["truncation_side"],
            "attention_mask": rule["attention_mask"],
        },
        "embedding_dim": dim,
        "exporter": EXPORTER,
        "checks": checks,
        "notes": list(plan.notes) + _snapshot_notes(plan, target, folder),
        "seconds": round(time.perf_counter() - started, 2),
    }
