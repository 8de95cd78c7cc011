"""`accelkit images import-model` on folders as the installed transformers and huggingface_hub
write them: a whole CLIPProcessor/SiglipProcessor saved by transformers 5 (`processor_config.json`
with the image processor nested in it, no preprocessor_config.json) with other mean/std and sizes
than the defaults, checked against transformers' own `AutoImageProcessor`; a snapshot in the
Hugging Face hub cache (`models--org--name/snapshots/<commit>/`, files linked to `blobs/`)."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from tests.support import hf_two_tower
from tests.support.cli import result_of, run_cli
from tests.support.import_model import NAMES, cosine, refused

# not the model type's defaults (CLIP's are OpenAI's, SigLIP's 0.5): what the import must read
NORMALISE = {
    "clip": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "siglip": ((0.4, 0.45, 0.5), (0.2, 0.25, 0.3)),
}


def transformers_image_vectors(folder: Path, model, photos) -> np.ndarray:
    """get_image_features on transformers' own processor of the folder (PIL backend)."""
    import torch
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(str(folder), backend="pil")
    pixels = processor(images=[photos[n] for n in NAMES], return_tensors="np")["pixel_values"]
    with torch.no_grad():
        out = model.get_image_features(pixel_values=torch.from_numpy(np.asarray(pixels)))
    return (out if isinstance(out, torch.Tensor) else out.pooler_output).numpy()


@pytest.mark.parametrize("kind", sorted(NORMALISE))
def test_a_processor_saved_whole_is_read_and_checked_against_transformers(
    kind, tmp_path, capsys, photos
):
    mean, std = NORMALISE[kind]
    model = hf_two_tower.build(kind, tmp_path / "m", mean=mean, std=std, combined=True)
    assert (tmp_path / "m" / "processor_config.json").is_file()
    assert not (tmp_path / "m" / "preprocessor_config.json").exists()
    code, out, err = run_cli(["images", "import-model", str(tmp_path / "m"), "-o", str(tmp_path / "o"), "--json"], capsys)  # fmt: skip
    assert code == 0, err
    result = result_of(out)
    block = yaml.safe_load((tmp_path / "o" / "accelkit.yaml").read_text())
    assert block["preprocess"]["mean"] == list(mean) and block["preprocess"]["std"] == list(std)
    assert block["preprocess"]["image_size"] == [hf_two_tower.SIZE] * 2
    assert not [n for n in result["notes"] if "defaults" in n]
    assert result["checks"]["preprocess_min_cosine"] >= 0.9999
    from accelkit import images

    paths = []
    for name in NAMES:
        Image.fromarray(photos[name]).save(tmp_path / f"{name}.png")
        paths.append(str(tmp_path / f"{name}.png"))
    settings = images.load_settings(tmp_path / "o" / "accelkit.yaml")
    images.embed(paths, str(tmp_path / "e.npy"), config=settings)
    want = transformers_image_vectors(tmp_path / "m", model, photos)
    assert cosine(np.load(tmp_path / "e.npy"), want).min() >= 0.9999


def test_a_processor_of_another_size_than_the_tower_is_refused(tmp_path, capsys):
    """A 64-px CLIP whose saved processor resizes to 96 (the tower would be given 96x96)."""
    hf_two_tower.build("clip", tmp_path / "m", side=96, combined=True)
    line = refused(capsys, str(tmp_path / "m"), str(tmp_path / "out"))
    assert "processor_config.json" in line and "vision_config.image_size 64" in line


def test_a_processor_config_without_its_image_processor_is_refused(tmp_path, capsys):
    hf_two_tower.build("clip", tmp_path / "m", combined=True)
    (tmp_path / "m" / "processor_config.json").write_text('{"processor_class": "CLIPProcessor"}')
    line = refused(capsys, str(tmp_path / "m"), str(tmp_path / "out"))
    assert "processor_config.json" in line and "no image_processor" in line


def test_the_preprocessing_check_is_transformers_own_processor(tmp_path, capsys, monkeypatch):
    """accelkit reading the folder's processor wrongly (OpenAI's mean/std, CLIP's defaults, in
    place of the saved 0.5: what it wrote before it read processor_config.json) is refused by the
    check, which runs transformers' AutoImageProcessor of the folder, not accelkit's own
    reconstruction of the processor from what it read."""
    from accelkit.images.importing import folder as folder_module

    real = folder_module.image_rule
    openai = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))

    def misread(processor, path, size):
        shape, _, _, fit, resample = real(processor, path, size)
        return (shape, *openai, fit, resample)

    mean, std = NORMALISE["clip"]
    hf_two_tower.build("clip", tmp_path / "m", mean=mean, std=std, combined=True)
    monkeypatch.setattr(folder_module, "image_rule", misread)
    line = refused(capsys, str(tmp_path / "m"), str(tmp_path / "out"))
    assert "preprocessing differs from the model's image processor" in line
    assert "processor_config.json" in line


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def hub_cache(source: Path, cache: Path, repo_id: str, commit: str) -> Path:
    """`source`'s files as huggingface_hub's hf_hub_download/snapshot_download store them:
    `models--org--name/blobs/<etag>` (sha256 for LFS files such as the weights, the git blob
    sha1 for the others), `refs/main` holding the commit, and `snapshots/<commit>/<file>` a
    relative symlink to its blob. Returns the snapshot folder."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    snapshot.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        data = path.read_bytes()
        lfs = path.suffix == ".safetensors"
        etag = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
        (repo / "blobs" / etag).write_bytes(data)
        os.symlink(os.path.relpath(repo / "blobs" / etag, snapshot), snapshot / path.name)
    return snapshot


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else p.stat().st_size)
        for p in sorted(root.rglob("*"))
    }


def test_a_hub_cache_snapshot_is_imported_outside_the_cache_named_after_its_repo(
    tmp_path, capsys, monkeypatch
):
    from huggingface_hub import scan_cache_dir

    hf_two_tower.build("clip", tmp_path / "saved")
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    config.pop("_name_or_path", None)  # as a hub repo's config.json: no local path in it
    (tmp_path / "saved" / "config.json").write_text(json.dumps(config))
    commit = hashlib.sha1(b"tiny-clip").hexdigest()
    snapshot = hub_cache(tmp_path / "saved", tmp_path / "hub", "acme/tiny-clip", commit)
    scanned = scan_cache_dir(tmp_path / "hub")
    assert not scanned.warnings
    [repo] = scanned.repos
    assert repo.repo_id == "acme/tiny-clip" and [r.commit_hash for r in repo.revisions] == [commit]
    shutil.rmtree(tmp_path / "saved")
    before = tree(tmp_path / "hub")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # platformdirs' data dir
    code, out, err = run_cli(["images", "import-model", str(snapshot), "--json"], capsys)
    assert code == 0, err
    result = result_of(out)
    expected = tmp_path / "data" / "accelkit" / "models" / f"acme--tiny-clip-{commit[:12]}"
    assert result["output"] == str(expected) and (expected / "accelkit.yaml").is_file()
    assert tree(tmp_path / "hub") == before  # nothing written into the cache
    assert result["name"] == "acme/tiny-clip"
    block = yaml.safe_load((expected / "accelkit.yaml").read_text())
    assert block["model"]["name"] == "acme/tiny-clip"
    assert any("outside the cache" in note for note in result["notes"])


def test_the_cache_repository_folder_is_read_at_refs_main_and_an_output_in_the_cache_is_warned(
    tmp_path, capsys
):
    """Given the repository folder itself (models--org--name/, told by its
    layout, here named otherwise), the snapshot refs/main names is imported; an output anywhere in
    the cache — in the repository folder beside snapshots/, which deleting the revision or `hf
    cache prune` removes whole — is INSIDE it, said as a warning, never as "outside"."""
    hf_two_tower.build("clip", tmp_path / "saved")
    commit = hashlib.sha1(b"tiny-clip").hexdigest()
    snapshot = hub_cache(tmp_path / "saved", tmp_path / "hub", "acme/tiny-clip", commit)
    repo = snapshot.parents[1]
    renamed = repo.rename(repo.with_name("tiny-clip-cache"))  # the layout, not the name
    output = renamed / "out"
    code, out, err = run_cli(["images", "import-model", str(renamed), "-o", str(output), "--json"], capsys)  # fmt: skip
    assert code == 0, err
    result = result_of(out)
    assert result["source"] == str(renamed / "snapshots" / commit)
    assert (output / "accelkit.yaml").is_file()
    notes = " ".join(result["notes"])
    assert "written outside the cache" not in notes and "INSIDE the Hugging Face cache" in notes
    assert "hf cache prune" in notes and "delete_revisions" in notes
    assert any("INSIDE the Hugging Face cache" in w for w in json.loads(out)["warnings"])
    (renamed / "refs" / "main").write_text("0" * 40)  # refs/main names no snapshot held
    line = refused(capsys, str(renamed), str(tmp_path / "o2"))
    assert "refs/main names no snapshot" in line and commit in line
