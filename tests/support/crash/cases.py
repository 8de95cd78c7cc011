"""The commands the crash harness (harness.py) kills, each with a small starting state so that a run
takes seconds: LeRobot sample datasets (v2.1 and v3.0), a stale dataset for `stats check --fix`,
photos and a Milvus Lite store (a server too with --server, where one can run), a tiny BERT for
`quant apply`, an old `bench --output` file to be replaced, and a full store for `images migrate`
(Milvus Lite to Milvus Lite; with --server, Lite to a server and a server to Lite)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.support.crash.harness import Case
from tests.support.crash.process import accelkit, child_env
from tests.support.crash.store import store_state

PHOTOS = 12
STORE_FILES = re.compile(r"(^|/)(store/|\.?images\.db)")  # the store is compared by what it holds


def cli(folder: Path, *args: str) -> None:
    done = subprocess.run(
        accelkit(*args), cwd=folder, env=child_env(), capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"accelkit {' '.join(args)} exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        )


def sample(folder: Path, layout: str) -> None:
    cli(
        folder,
        "-q",
        "sample-dataset",
        "ds",
        "--episodes",
        "12",
        "--frames",
        "150",
        "--layout",
        layout,
    )


def stats_argv(folder: Path) -> list[str]:
    return accelkit("stats", "ds", "--format", "lerobot", "--per-episode", "--write-into", "ds")


def stale(folder: Path) -> None:
    """A v3.0 dataset whose stats.json says the action's mean is 1 more than it is, and a
    norm_stats.json beside it that says the same: `stats check --fix` recomputes and rewrites
    their statistics (per-episode files, stats.json, sidecars, norm_stats.json and its .bak)."""
    import shutil

    sample(folder, "v3.0")
    cli(folder, "-q", *stats_argv(folder)[3:], "--no-progress")
    shutil.rmtree(folder / "ds" / "meta" / ".accelkit-backup")
    path = folder / "ds" / "meta" / "stats.json"
    stats = json.loads(path.read_text())
    stats["action"]["mean"] = [v + 1.0 for v in stats["action"]["mean"]]
    path.write_text(json.dumps(stats, indent=4))
    cli(folder, "-q", "stats", "ds", "-o", "norm_stats.json", "--no-progress")
    path = folder / "norm_stats.json"
    stats = json.loads(path.read_text())
    stats["norm_stats"]["actions"]["mean"] = [v + 1 for v in stats["norm_stats"]["actions"]["mean"]]
    path.write_text(json.dumps(stats, indent=2))


def photos(folder: Path, server: str | None = None) -> Path:
    from PIL import Image

    from accelkit.images.embedding.models import cached_onnx_path
    from accelkit.images.testing import photos as shipped

    images = folder / "photos"
    images.mkdir()
    arrays = shipped()
    for i, name in enumerate(sorted(arrays)[:PHOTOS]):
        Image.fromarray(arrays[name]).save(images / f"p{i:02d}.jpg")
    store = (
        f"uri: {server}\n  timeout: 120" if server else "uri: store/images.db"
    )  # relative: each trial's copy has its own
    (folder / "images.yaml").write_text(
        "preprocess:\n  cache_compiled: false\n  batch_size: 4\n"
        f"model:\n  onnx_path: {cached_onnx_path()}\nstore:\n  {store}\n"
    )
    return images


def insert_argv(folder: Path, files=None, meta: int = 2) -> list[str]:
    paths = files or ["photos"]
    return accelkit(
        "images", "insert", *paths, "--config", "images.yaml", "--collection", "pics",
        "--create-collection", "--metadata", json.dumps({"version": meta}),
    )  # fmt: skip


def filled(folder: Path, server: str | None = None, half: bool = True) -> None:
    """Photos and a store whose collection `pics` holds the first half of them (version 1 of
    their metadata), or all of them (`half=False`)."""
    images = photos(folder, server)
    chosen = sorted(images.iterdir())[: PHOTOS // 2 if half else PHOTOS]
    cli(
        folder,
        "-q",
        *insert_argv(folder, [str(p.relative_to(folder)) for p in chosen], 1)[3:],
        "--no-progress",
    )


def lite_state(folder: Path) -> dict:
    db = folder / "store" / "images.db"
    return store_state(str(db)) if db.exists() else {"collections": {}, "stray_thumbnails": {}}


def acknowledged_images(output: str) -> int:
    """The count of the last progress line ("inserting: 8/12 images"): images stored for good."""
    counts = re.findall(r"inserting: (\d+)/(\d+) images", output)
    return int(counts[-1][0]) if counts else 0


COPY = "store/copy.db"  # a Lite DST: under store/, compared by what it holds


def migrate_argv(source: str, target: str, *flags: str) -> list[str]:
    """`images migrate` in batches of 4 (three per collection: two marks moved between them)."""
    return accelkit("images", "migrate", source, target, "--batch-size", "4", *flags)


def migration(source: dict, target: dict) -> dict:
    """A migration's state: DST's store (what compare_stores reads: its collections, thumbnails
    and marks) with SRC's beside it."""
    return {**target, "source": source}


def migrate_check(old: dict, now: dict) -> list[str]:
    """SRC as it was (the hidden `_accelkit_store` marker is no collection of the dump), each
    item in DST bit-equal to SRC's (vector, metadata, and its thumbnail where DST keeps one), and
    every SRC item up to DST's mark there (the ones the command counted as copied)."""
    problems = []
    before, source = old["source"]["collections"], now["source"]["collections"]
    for name in sorted(set(before) | set(source)):
        if before.get(name) != source.get(name):
            problems.append(f"source changed: collection {name!r} in SRC is not as it was")
    for name, entry in sorted(now["collections"].items()):
        held = source.get(name, {}).get("items", {})
        for item_id, item in sorted(entry["items"].items()):
            theirs = held.get(item_id)
            if (
                theirs is None
                or any(item[part] != theirs[part] for part in ("vector", "metadata"))
                or item["thumbnail"] not in (None, theirs["thumbnail"])
            ):
                problems.append(f"half: item {item_id!r} of {name!r} in DST is not SRC's")
        mark = (now.get("marks") or {}).get(name) or {}
        if mark.get("after") is not None:
            missing = sorted(i for i in held if i <= mark["after"] and i not in entry["items"])
            if missing:
                problems.append(
                    f"unacknowledged: DST's mark is at {mark['after']!r} ({mark['copied']} copied)"
                    f" and {len(missing)} items up to it are not there: {missing[:3]}"
                )
    return problems


def migrate_lite_state(folder: Path) -> dict:
    copy = folder / COPY
    target = (
        store_state(str(copy), marks=True)
        if copy.exists()
        else {"collections": {}, "stray_thumbnails": {}}
    )
    return migration(lite_state(folder), target)


def tiny_model(folder: Path) -> None:
    import shutil

    import torch
    import transformers

    from accelkit.quant.models import minilm_path

    torch.manual_seed(0)
    model = folder / "tinybert"
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64,
    )  # fmt: skip
    transformers.BertModel(config).save_pretrained(model, safe_serialization=True)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_path() / name, model / name)
    (folder / "calib.txt").write_text(
        "the robot picks up the red block\na gripper closes around the handle of the mug\n"
        "open the drawer and put the spoon inside\nstack the green cube on the blue one\n"
    )
    (folder / "out").mkdir()
    (folder / "out" / "q.safetensors").write_bytes(b"an older model, replaced whole or not at all")


def old_bench(folder: Path) -> None:
    (folder / "out").mkdir()
    (folder / "out" / "bench.json").write_text('{"schema": "an older result"}\n')


def cases(server: bool = False) -> list[Case]:
    found = [
        Case(
            "stats-v21",
            "stats --format lerobot --per-episode --write-into (v2.1)",
            lambda f: sample(f, "v2.1"),
            stats_argv,
        ),
        Case(
            "stats-v30",
            "stats --format lerobot --per-episode --write-into (v3.0)",
            lambda f: sample(f, "v3.0"),
            stats_argv,
        ),
        Case(
            "stats-check-fix",
            "stats check --stats norm_stats.json --fix",
            stale,
            lambda f: accelkit("stats", "check", "ds", "--stats", "norm_stats.json", "--fix"),
        ),
        Case(
            "images-insert-new",
            "images insert --create-collection (Milvus Lite, new collection)",
            photos,
            insert_argv,
            store=lite_state,
            ignore=STORE_FILES,
            acknowledged=acknowledged_images,
        ),
        Case(
            "images-insert-existing",
            "images insert (Milvus Lite, half the ids stored: replaced)",
            filled,
            insert_argv,
            store=lite_state,
            ignore=STORE_FILES,
            acknowledged=acknowledged_images,
        ),
        Case(
            "images-delete",
            "images collection delete (Milvus Lite)",
            lambda f: filled(f, half=False),
            lambda f: accelkit("images", "collection", "delete", "pics", "--config", "images.yaml"),
            store=lite_state,
            ignore=STORE_FILES,
            rerun_codes=(2,),  # killed after the drop: "collection 'pics' does not exist"
        ),
        Case(
            "images-migrate-lite",
            "images migrate (Milvus Lite -> Milvus Lite, batches of 4)",
            lambda f: filled(f, half=False),
            lambda f: migrate_argv("store/images.db", COPY),
            store=migrate_lite_state,
            ignore=STORE_FILES,
            check=migrate_check,
        ),
        Case(
            "quant-apply",
            "quant apply --output",
            tiny_model,
            lambda f: accelkit(
                "quant",
                "apply",
                "--model",
                "tinybert",
                "--output",
                "out/q.safetensors",
                "--method",
                "rtn",
                "--calibration",
                "calib.txt",
                "--eval-data",
                "calib.txt",
            ),
            ignore=re.compile(r"^(tinybert/|calib\.txt)"),
        ),
        Case(
            "bench",
            "bench xla --output",
            old_bench,
            lambda f: accelkit(
                "bench",
                "xla",
                "numpy,jax",
                "--matrix-size",
                "300",
                "--repeats",
                "3",
                "--output",
                "out/bench.json",
            ),
        ),
    ]
    if server:
        found += server_cases()
    return found


def server_cases() -> list[Case]:
    """`images insert` into a Milvus server's database of its own per trial (tests/support
    /milvus_server.py; needs root for its network namespace)."""
    from tests.support.milvus_server import MilvusServer, server_database, unavailable

    if unavailable():
        return []
    import atexit
    import itertools
    import shutil
    import tempfile

    data = tempfile.mkdtemp(prefix="accelkit-faults-milvus-")
    server = MilvusServer(data).start()
    atexit.register(shutil.rmtree, data, ignore_errors=True)
    atexit.register(server.stop)  # first: atexit runs last in, first out
    names = (f"faults{i}" for i in itertools.count())
    where: dict[Path, str] = {}

    def prepare(folder: Path) -> None:
        where[folder] = server_database(server, next(names))
        filled(folder, f"{server.uri}\n  db_name: {where[folder]}")

    def state(folder: Path) -> dict:
        return store_state(server.uri, where[folder])

    template: list[Path] = []

    def full_lite(folder: Path) -> None:
        """The Lite store of images-migrate-lite, made once and copied for each trial."""
        if not template:
            template.append(Path(tempfile.mkdtemp(prefix="accelkit-faults-lite-")))
            atexit.register(shutil.rmtree, template[0], ignore_errors=True)
            filled(template[0], half=False)
        shutil.copytree(template[0], folder, symlinks=True, dirs_exist_ok=True)

    def lite_to_server(folder: Path) -> None:
        full_lite(folder)
        where[folder] = server_database(server, next(names))

    def server_to_lite(folder: Path) -> None:
        """A server database holding the same collection (copied there by migrate itself, in
        one batch: embedding the photos again for each trial would take longer)."""
        lite_to_server(folder)
        cli(folder, "-q", "images", "migrate", "store/images.db", server.uri,
            "--target-db", where[folder], "--no-progress")  # fmt: skip
        shutil.rmtree(folder / "store")
        (folder / "store").mkdir()

    return [
        Case(
            "images-insert-server",
            "images insert (Milvus server, half the ids stored: replaced)",
            prepare,
            insert_argv,
            store=state,
            ignore=re.compile(r"^images\.yaml$"),  # names each trial's own database
            acknowledged=acknowledged_images,
            fresh_each_trial=True,
        ),
        Case(
            "images-migrate-lite-server",
            "images migrate (Milvus Lite -> Milvus server, batches of 4)",
            lite_to_server,
            lambda f: migrate_argv("store/images.db", server.uri, "--target-db", where[f]),
            store=lambda f: migration(lite_state(f), store_state(server.uri, where[f], marks=True)),
            ignore=STORE_FILES,
            check=migrate_check,
            fresh_each_trial=True,
        ),
        Case(
            "images-migrate-server-lite",
            "images migrate (Milvus server -> Milvus Lite, batches of 4)",
            server_to_lite,
            lambda f: migrate_argv(server.uri, COPY, "--source-db", where[f]),
            store=lambda f: migrate_lite_state(f) | {"source": state(f)},
            ignore=STORE_FILES,
            check=migrate_check,
            fresh_each_trial=True,
        ),
    ]
