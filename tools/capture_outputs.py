"""Capture what accelkit's commands print and write, so a restructuring can show it changed nothing.

    python3 tools/capture_outputs.py --out /tmp/before            # this tree
    ... move files ...
    python3 tools/capture_outputs.py --out /tmp/after
    diff -r /tmp/before /tmp/after                                 # must print nothing

Each case runs `python -m accelkit …` from `--tree`'s `src/` in a scratch folder (fixed COLUMNS,
no terminal, fresh HOME and caches) and records its exit code, stdout, stderr and the files it
wrote (JSON as text, other files by size and SHA-256). What changes from run to run with the same
code is masked: durations, rates, dates, the scratch folder's path, process ids, memory figures.
Every command's `--help` is captured too, so a face that lost or renamed an option shows.
A run captures twice on the same tree gives identical folders (checked by `--twice`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# --help of every command and group
HELP = [
    [],
    ["devices"],
    ["sample-dataset"],
    ["stats"],
    ["stats", "compute"],
    ["stats", "check"],
    ["stats", "diff"],
    ["images"],
    ["images", "embed"],
    ["images", "insert"],
    ["images", "search"],
    ["images", "serve"],
    ["images", "health"],
    ["images", "migrate"],
    ["images", "collection"],
    *[
        ["images", "collection", c]
        for c in ("list", "create", "stats", "flush", "index", "set-model", "delete")
    ],
    ["quant"],
    ["quant", "eval"],
    ["quant", "apply"],
    ["bench"],
    *[
        ["bench", c]
        for c in ("xla", "chain", "jit", "scipy", "autograd", "mnist", "train", "parallel", "all")
    ],
]

FIX = "{fixtures}"  # tests/stats/fixtures of the tree under test


def cases() -> list[tuple[str, list[str]]]:
    """name -> argv after `accelkit`; run in order in one scratch folder (later ones use earlier
    ones' files)."""
    v30, v21 = f"{FIX}/lerobot_v30", f"{FIX}/lerobot_v21"
    return [
        ("sample", ["sample-dataset", "ds", "--episodes", "6", "--frames", "40", "--json"]),
        (
            "sample_v30",
            [
                "sample-dataset",
                "ds3",
                "--episodes",
                "5",
                "--frames",
                "30",
                "--layout",
                "v3.0",
                "--seed",
                "3",
            ],
        ),
        ("sample_again", ["sample-dataset", "ds", "--exist-ok"]),
        ("sample_exists", ["sample-dataset", "ds"]),
        ("stats", ["stats", "ds", "-o", "norm.json"]),
        ("stats_json", ["stats", "ds", "-o", "norm2.json", "--json"]),
        ("stats_lerobot", ["stats", "ds", "--format", "lerobot", "-o", "lerobot.json"]),
        ("stats_fast", ["stats", "ds", "--fast", "-o", "fast.json"]),
        ("stats_quantiles", ["stats", "ds", "--quantiles", "0.05,0.5,0.95", "-o", "q.json"]),
        (
            "stats_chunks",
            [
                "stats",
                "ds",
                "--action-horizon",
                "4",
                "--delta-actions",
                "6,-1",
                "-o",
                "chunks.json",
            ],
        ),
        ("stats_max_frames", ["stats", "ds", "--max-frames", "100", "-o", "mf.json"]),
        ("stats_v30", ["stats", "ds3", "-o", "norm3.json"]),
        ("stats_mixture", ["stats", "ds", "ds3", "--weights", "0.7,0.3", "-o", "mix.json"]),
        ("stats_union", ["stats", "ds", "ds3", "-o", "union.json"]),
        ("stats_fixture_v30", ["stats", v30, "-o", "fx30.json"]),
        ("stats_fixture_v21", ["stats", v21, "--format", "lerobot", "-o", "fx21.json"]),
        ("stats_missing", ["stats", "no_such_dataset"]),
        ("stats_bad_quantiles", ["stats", "ds", "--quantiles", "1.5"]),
        ("stats_bad_keys", ["stats", "ds", "--keys", "state=nope"]),
        ("check_ok", ["stats", "check", "ds"]),
        ("check_fixture", ["stats", "check", v30]),
        ("check_fixture_json", ["stats", "check", v21, "--json"]),
        ("check_norm", ["stats", "check", "ds", "--stats", "norm.json"]),
        ("check_fast", ["stats", "check", "ds", "--stats", "fast.json", "--json"]),
        ("check_plot", ["stats", "check", v30, "--plot", "check.png"]),
        ("diff_same", ["stats", "diff", "norm.json", "norm2.json"]),
        ("diff_fast", ["stats", "diff", "norm.json", "fast.json"]),
        ("diff_fast_json", ["stats", "diff", "fast.json", "norm.json", "--json"]),
        ("diff_dataset", ["stats", "diff", "norm.json", "mf.json", "--dataset", "ds"]),
        ("diff_missing", ["stats", "diff", "norm.json", "nothing.json"]),
        ("images_embed", ["images", "embed", "imgs", "-o", "emb.npz"]),
        ("images_embed_json", ["images", "embed", "imgs", "-o", "emb2.npz", "--json"]),
        ("images_insert", ["images", "insert", "imgs", "--create-collection"]),
        ("images_list", ["images", "collection", "list"]),
        ("images_describe", ["images", "collection", "stats", "images", "--json"]),
        ("images_search", ["images", "search", "imgs/img_03.png", "-k", "3"]),
        ("images_search_json", ["images", "search", "imgs/img_05.png", "-k", "4", "--json"]),
        ("images_search_missing", ["images", "search", "imgs/none.png"]),
        ("images_health", ["images", "health", "--json"]),
        (
            "quant_eval",
            [
                "quant",
                "eval",
                "--methods",
                "fp32,rtn",
                "--bits",
                "w8a8",
                "--pairs",
                "8",
                "--no-latency",
                "--json",
            ],
        ),
        ("quant_bad_bits", ["quant", "eval", "--bits", "w9a9"]),
        ("bench_autograd", ["bench", "autograd", "--json"]),
        ("devices_json", ["devices", "--json"]),
    ]


# key names whose values differ between runs of the same code
VOLATILE_KEY = re.compile(
    r"(second|_s$|^s$|time|_ms|^ms$|started|utc|date|elapsed|per_s|/s|throughput|speed|rss|"
    r"memory|peak|wall|cpu|pid|duration|latency|rate|fps|host|hostname|python|version|commit|"
    r"load_average|phases|accelkit_source|"
    r"dirty|hash_of_source|source_hash|machine|platform_release)",
    re.IGNORECASE,
)
VOLATILE_TEXT = [
    (re.compile(r"\d+(\.\d+)?\s?(ms|µs|us|ns|s|sec|min|h)\b"), "<T>"),
    (re.compile(r"[\d,]*\d(\.\d+)?\s?(k|M|G)?\s?(frames|rows|images|items|texts|B)/s"), "<RATE>"),
    (re.compile(r"\d+(\.\d+)?\s?(KiB|MiB|GiB|KB|MB|GB)\b"), "<MEM>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?"), "<DATE>"),
    (re.compile(r"\bpid \d+"), "pid <PID>"),
    (re.compile(r"[─━]+"), "─"),  # a table's width follows its widest (masked) cell
    (re.compile(r" {2,}"), "  "),
]


def mask_json(value, key: str = "", volatile: bool = False):
    """Values under a volatile key (and everything below it) masked; strings masked as text."""
    volatile = volatile or bool(key and VOLATILE_KEY.search(key))
    if isinstance(value, dict):
        return {k: mask_json(v, k, volatile) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_json(v, key, volatile) for v in value]
    if volatile and isinstance(value, int | float | str) and value != "":
        return "<MASKED>"
    if isinstance(value, str):
        return mask_text(value)
    return value


PROGRESS = re.compile(r"^\[ *[\d.]+ ?(ms|s|min)\] .*$\n?", re.MULTILINE)


def mask_text(text: str) -> str:
    text = PROGRESS.sub("", text)  # progress lines: how many appear depends on the clock
    for pattern, replacement in VOLATILE_TEXT:
        text = pattern.sub(replacement, text)
    return text


def record_stream(text: str, scratch: str, tree: Path) -> str:
    text = text.replace(scratch, "<SCRATCH>").replace(str(tree), "<TREE>")
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            return json.dumps(mask_json(json.loads(stripped)), indent=2, sort_keys=True) + "\n"
        except ValueError:
            pass
    return mask_text(text)


def write_images(folder: Path) -> None:
    """Eight small deterministic RGB images (gradients and blocks): the same bytes every run."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:48, 0:64]
    for i in range(8):
        r = (x * (i + 1) * 4) % 256
        g = (y * (8 - i) * 5) % 256
        b = ((x // (4 + i)) + (y // (3 + i))) % 2 * 255
        array = np.stack([r, g, b], axis=-1).astype(np.uint8)
        Image.fromarray(array).save(folder / f"img_{i:02d}.png")


def snapshot_files(scratch: Path, seen: dict[str, str]) -> dict[str, str]:
    """New or changed files under scratch: JSON as masked text, others by size and hash."""
    changed = {}
    for path in sorted(scratch.rglob("*")):
        if not path.is_file() or path.name.startswith("."):
            continue
        rel = str(path.relative_to(scratch))
        if rel.startswith(("home/", "cache/", "imgs/")):
            continue
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if seen.get(rel) == digest:
            continue
        seen[rel] = digest
        if path.suffix in (".json", ".jsonl"):
            try:
                text = json.dumps(mask_json(json.loads(data)), indent=2, sort_keys=True)
            except ValueError:
                text = mask_text(data.decode(errors="replace"))
            changed[rel] = text
        elif "accelkit_images" in rel or path.suffix in (".png", ".log"):
            changed[rel] = "(binary store, log or figure: present)"
        else:
            changed[rel] = f"{len(data)} bytes sha256 {digest}"
    return changed


def capture(tree: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="accelkit-capture-") as tmp:
        scratch = Path(tmp)
        for sub in ("home", "cache"):
            (scratch / sub).mkdir()
        write_images(scratch / "imgs")
        env = {
            **os.environ,
            "PYTHONPATH": str(tree / "src"),
            "COLUMNS": "120",
            "HOME": str(scratch / "home"),
            "XDG_CACHE_HOME": str(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")),
            "NO_COLOR": "1",
            "PYTHONHASHSEED": "0",
        }
        env.pop("ACCELKIT_CONFIG", None)
        fixtures = str(tree / "tests" / "stats" / "fixtures")
        seen: dict[str, str] = {}
        runs = [(f"help_{'_'.join(argv) or 'accelkit'}", [*argv, "--help"]) for argv in HELP]
        runs += cases()
        for name, argv in runs:
            argv = [a.replace(FIX, fixtures) for a in argv]
            done = subprocess.run(
                [sys.executable, "-m", "accelkit", *argv],
                cwd=scratch,
                env=env,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=900,
            )
            shown = " ".join(argv).replace(fixtures, "<FIXTURES>")
            stdout = record_stream(done.stdout, str(scratch), tree).replace(fixtures, "<FIXTURES>")
            stderr = record_stream(done.stderr, str(scratch), tree).replace(fixtures, "<FIXTURES>")
            files = snapshot_files(scratch, seen)
            text = f"$ accelkit {shown}\nexit {done.returncode}\n--- stdout\n{stdout}\n"
            text += f"--- stderr\n{stderr}\n"
            for rel, body in files.items():  # written files name the tree under test too
                body = body.replace(fixtures, "<FIXTURES>").replace(str(tree), "<TREE>")
                text += f"--- file {rel}\n{body}\n"
            (out / f"{name}.txt").write_text(text)
            print(f"{name}: exit {done.returncode}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose src/ runs")
    parser.add_argument("--out", type=Path, required=True, help="folder for the captures")
    parser.add_argument("--twice", action="store_true", help="capture twice, compare, keep one")
    args = parser.parse_args()
    capture(args.tree.resolve(), args.out)
    if args.twice:
        again = args.out.with_name(args.out.name + ".again")
        capture(args.tree.resolve(), again)
        same = subprocess.run(["diff", "-r", str(args.out), str(again)]).returncode == 0
        shutil.rmtree(again)
        sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
