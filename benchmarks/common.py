"""What every benchmark shares: where things are (REPO, RESULTS, DOCS), the progress log, the
command line's rules for bad input (`ArgumentParser`, the argument types, `fail`) and the atomic
result write (`write_results`), the machine record (`accelkit.runtime.environment.record`), whole-process timing (wall, CPU and peak
RSS from `wait4`) and the generated inputs (LeRobot datasets, photos, model-ready tensors), each
made once under a data folder and reused.

Benchmarks run from the repository root as modules (`python -m benchmarks.ROOM.NAME`), so this is
`from benchmarks.common import ...`; nothing here edits sys.path."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DOCS = REPO / "docs"


def log(msg: str, tag: str = "") -> None:
    """One progress line on stderr, timed (`tag` names the benchmark where several run at once)."""
    prefix = f"{tag} " if tag else ""
    print(f"[{prefix}{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- command lines: bad input is one line and exit 2, results are written whole ------------------


def fail(message: str) -> NoReturn:
    """Bad input, as the product's command line says it: `error: MESSAGE` (naming the input and
    the fix) on one line on stderr, exit 2, no traceback."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _stopped(signum, frame) -> NoReturn:
    # once: a second SIGTERM while the `finally` blocks run must not cut them short (SIGKILL
    # still ends the process)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("stopped (SIGTERM): cleaning up", file=sys.stderr, flush=True)
    raise SystemExit(128 + signal.SIGTERM)


def stop_on_sigterm() -> None:
    """Make SIGTERM end this process as Ctrl-C does: an exception (`SystemExit(143)`) raised in
    the main thread, so that `finally` blocks and context managers run — a benchmark's temporary
    folder is removed and the servers it started (a Milvus server, `accelkit images serve`) are
    stopped, where the default action would end the process at once and leave them behind.
    `ArgumentParser.parse_args` calls it; a handler set before is kept."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _stopped)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors (an unknown option, a bad value, one of the types below
    refusing) are one line, `error: argument --x: ...`, and exit 2, like `fail`. Parsing also
    turns SIGTERM into a clean stop (`stop_on_sigterm`)."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see --help)")

    def parse_known_args(self, args=None, namespace=None):
        stop_on_sigterm()
        return super().parse_known_args(args, namespace)


def checked(flag: str, kind, value):
    """`kind(value)` (one of the argument types below) for a value argparse did not parse (a
    default computed after parsing); a refusal is `fail`'s one line naming `flag`."""
    try:
        return kind(value)
    except argparse.ArgumentTypeError as exc:
        fail(f"argument {flag}: {exc} (see --help)")


def _kind(path: Path) -> str:
    from accelkit.runtime.files import file_kind

    return file_kind(path.stat().st_mode)


def _existing(text: str | os.PathLike, is_kind, noun: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{path} does not exist; give an existing {noun}")
    if not is_kind(path):
        raise argparse.ArgumentTypeError(f"{path} is {_kind(path)}, not a {noun}; give a {noun}")
    return path


def existing_dir(text: str | os.PathLike) -> Path:
    """An argument type: a folder that exists."""
    return _existing(text, Path.is_dir, "folder")


def existing_file(text: str | os.PathLike) -> Path:
    """An argument type: a regular file that exists."""
    return _existing(text, Path.is_file, "file")


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _writable(folder: Path) -> bool:
    """Whether this process can make a file in `folder` (tried, not read off the mode bits: root
    passes every mode check, and /proc refuses whatever its bits say)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def work_dir(text: str | os.PathLike) -> Path:
    """An argument type: a folder to work in (made when missing): an existing folder, or a path
    whose nearest existing parent is a folder this process can write in."""
    path = Path(text)
    base = path if path.exists() else _nearest_existing(path)
    if not base.is_dir():
        what = f"{path} is" if base == path else f"{path} cannot be made: {base} is"
        raise argparse.ArgumentTypeError(
            f"{what} {_kind(base)}, not a folder; give a folder (made when missing)"
        )
    if not _writable(base):
        raise argparse.ArgumentTypeError(
            f"{path}: cannot write in {base}; give a folder you can write in"
        )
    return path


def out_file(text: str | os.PathLike) -> Path:
    """An argument type: where a result file goes, checked before any work: not a folder, in a
    folder this process can write in (made when missing)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a folder; give a file path to write to")
    base = _nearest_existing(path.parent)
    if not base.is_dir():
        raise argparse.ArgumentTypeError(
            f"{path} cannot be written: {base} is {_kind(base)}; give a path in a folder"
        )
    if not _writable(base):
        raise argparse.ArgumentTypeError(
            f"{path} cannot be written: no writing in {base}; give a path you can write"
        )
    return path


def interpreter(text: str) -> str:
    """An argument type: a Python interpreter to run (a path, or a name on PATH): executable."""
    found = shutil.which(text)
    if found is None:
        path = Path(text)
        what = "not executable" if path.is_file() else "not found"
        raise argparse.ArgumentTypeError(f"{text}: {what}; give a Python interpreter's path")
    return text


def listed(valid: tuple[str, ...] | list[str]):
    """An argument type: a comma-separated list whose every item is one of `valid` (returned as
    given); an unknown item is refused, with the valid ones named."""

    def check(text: str) -> str:
        items = [item.strip() for item in text.split(",")]
        unknown = [item for item in items if item not in valid]
        if unknown or not text.strip():
            what = "empty" if not text.strip() else f"unknown {', '.join(map(repr, unknown))}"
            raise argparse.ArgumentTypeError(
                f"{what}; give a comma-separated list of {', '.join(valid)}"
            )
        return text

    return check


def positive(kind=int):
    """An argument type: a number (`kind`, int or float) greater than zero."""

    def check(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0:
            name = "whole number" if kind is int else "number"
            raise argparse.ArgumentTypeError(f"{text!r}: give a {name} greater than 0")
        return value

    check.__name__ = f"positive {kind.__name__}"
    return check


def server_uri(text: str) -> str:
    """An argument type: a Milvus server's URI (http://host:19530), not a Milvus Lite file."""
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme not in ("http", "https", "tcp", "grpc") or not text.split("://", 1)[1].strip("/"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Milvus server's URI; give one such as http://host:19530"
        )
    return text


def whole_number(text: str) -> int:
    """An argument type: a whole number 0 or more (a seed: numpy's generators refuse a negative
    one, after the work has begun)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number 0 or more")
    return value


def check_server(uri: str, token: str | None = None, flag: str = "--uri") -> None:
    """Connect to the Milvus server at `uri` (with `token`) once, before any work; one that cannot
    be reached (nothing listening, a wrong token) is `fail`'s one line naming `flag`."""
    from accelkit.images.settings.config import StoreConfig
    from accelkit.images.store import VectorStore
    from accelkit.images.store.errors import StoreError

    try:
        with VectorStore(StoreConfig(uri=uri, token=token, timeout=30)):
            pass
    except StoreError as exc:
        reason = str(exc).split("; check store.uri", 1)[0]
        fail(f"argument {flag}: {reason}; give a running Milvus server's URI (and its --token)")


def not_negative(text: str) -> float:
    """An argument type: a number 0 or more (seconds to wait, say)."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number 0 or more")
    return value


def src_tree(text: str | os.PathLike) -> Path:
    """An argument type: a source folder holding an `accelkit` package (`git archive main src`)."""
    path = existing_dir(text)
    if not (path / "accelkit" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(
            f"{path} holds no accelkit/__init__.py; give a src folder (e.g. `git archive main src`)"
        )
    return path


def numbers(text: str) -> str:
    """An argument type: a comma-separated list of whole numbers greater than 0 (returned as
    given)."""
    try:
        ok = all(int(item) > 0 for item in text.split(","))
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give comma-separated whole numbers greater than 0 (e.g. 10000,100000)"
        )
    return text


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """`text` at `path`, whole or not at all (the product's `runtime.files.atomic_open`: a
    temporary file beside it, flushed and renamed over it, the mode of the file it replaces
    kept)."""
    from accelkit.runtime.files import atomic_open

    with atomic_open(path, "w", output=False) as handle:
        handle.write(text)
    return Path(path)


def partial(path: str | os.PathLike) -> Path:
    """Where a run's progress goes while it runs (`NAME.partial.json` beside `path`): a run cut
    short keeps what it measured there, and the result at `path` stays as it was."""
    target = Path(path)
    return target.with_name(f"{target.stem}.partial{target.suffix}")


def _dumps(payload, indent, newline, default) -> str:
    return json.dumps(payload, indent=indent, default=default) + ("\n" if newline else "")


def write_progress(
    path: str | os.PathLike, payload, *, indent: int | None = 2, newline: bool = True, default=None
) -> Path:
    """What a run has measured so far, atomically at `partial(path)` (never at `path`)."""
    return write_atomic(partial(path), _dumps(payload, indent, newline, default))


def write_results(
    path: str | os.PathLike, payload, *, indent: int | None = 2, newline: bool = True, default=None
) -> Path:
    """`payload` as JSON at `path`, whole or not at all (serialized first: a serialization error
    never touches the file; then `write_atomic`). Call it once the run has finished, so that a
    failure before leaves the committed result as it was; the run's progress file goes."""
    target = write_atomic(path, _dumps(payload, indent, newline, default))
    partial(target).unlink(missing_ok=True)
    return target


def machine(packages: tuple[str, ...] = ("numpy",), **extra) -> dict:
    """accelkit's run record (`accelkit.runtime.environment.record`: machine, load, versions, which
    accelkit source was measured) with the versions of `packages` and the `extra` fields."""
    from accelkit.runtime.environment import record

    return {**record(packages), **extra}


# --- whole processes ------------------------------------------------------------------------------


def accelkit_command() -> list[str]:
    return [sys.executable, "-m", "accelkit"]


def module_command(module: str, *args: str, python: str | None = None) -> list[str]:
    """`python -m MODULE ARGS` (a benchmark as a child process: run it with `repo_env()`, so that
    `benchmarks` imports from any working folder and in another environment's Python)."""
    return [python or sys.executable, "-m", module, *args]


def repo_env(env: dict[str, str] | None = None, *front: str) -> dict[str, str]:
    """`env` (default: this process's) with the repository (and `front` before it) first on the
    child's PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    paths = (*front, str(REPO), env.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def run_process(command: list[str], env: dict | None = None, cwd: Path | None = None) -> dict:
    """One whole process: wall seconds, CPU seconds and peak RSS from the kernel (`wait4`)."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd or REPO
        )
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except BaseException:  # stopped (Ctrl-C, SIGTERM): the child goes too
            process.kill()
            process.wait()
            raise
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            out.seek(0)
            tail = out.read().decode(errors="replace")[-2000:]
            raise SystemExit(f"{' '.join(command)} exited {process.returncode}:\n{tail}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,
    }


def rounds(commands: dict[str, callable], count: int) -> dict:
    """Every process once to warm up, then `count` rounds, the first one rotating each round."""
    names = list(commands)
    calls: dict[str, list[dict]] = {name: [] for name in names}
    for name in names:
        log(f"  warm-up: {name}")
        commands[name]()
    for r in range(count):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            load = os.getloadavg()[0]
            call = commands[name]()
            call["load_before"] = round(load, 2)
            calls[name].append(call)
            log(f"  round {r + 1}/{count}: {name} {call['wall_s']:.2f} s (load {load:.1f})")
    return calls


# --- generated inputs (made once under a data folder, reused) ---------------------------------------


def ensure_parquet_dataset(
    data_dir: Path, frames: int, frames_per_episode: int, dim: int = 14, columns: str = "smooth"
) -> tuple[Path, dict]:
    """A LeRobot v2.1 dataset of >= `frames` frames, generated once and reused (keyed by its size
    and `columns`, `write_sample_dataset`'s)."""
    from accelkit.stats.formats.synthetic import write_sample_dataset

    tag = "" if columns == "smooth" else f"_{columns}"
    root = data_dir / f"lerobot_v21_f{frames}_e{frames_per_episode}_d{dim}{tag}"
    marker = root / "bench_done.json"
    if marker.is_file():
        info = json.loads(marker.read_text())
        info["generated_now"] = False
        return root, info
    if root.exists():  # an interrupted generation
        shutil.rmtree(root)
    # episode lengths are uniform in [fpe/2, 3*fpe/2]; 3% more episodes make >= `frames` likely, and
    # the true count is checked below
    episodes = math.ceil(frames / frames_per_episode * 1.03) + 2
    started = time.perf_counter()
    write_sample_dataset(
        root,
        episodes=episodes,
        frames_per_episode=frames_per_episode,
        dim=dim,
        layout="v2.1",
        seed=0,
        columns=columns,
    )
    meta = json.loads((root / "meta" / "info.json").read_text())
    info = {
        "path": str(root),
        "layout": "v2.1",
        "episodes": episodes,
        "frames": int(meta["total_frames"]),
        "files": len(list((root / "data").rglob("*.parquet"))),
        "bytes_on_disk": sum(p.stat().st_size for p in (root / "data").rglob("*.parquet")),
        "generation_s": time.perf_counter() - started,
    }
    if info["frames"] < frames:
        raise SystemExit(
            f"generated dataset has {info['frames']} frames < {frames}; raise the episode margin"
        )
    marker.write_text(json.dumps(info, indent=2))
    info["generated_now"] = True
    return root, info


def ensure_v30(
    data_dir: Path,
    frames: int,
    frames_per_episode: int,
    columns: str = "smooth",
    row_groups: str = "episode",
) -> tuple[Path, dict]:
    """A LeRobot v3.0 dataset packed as LeRobot records one (formats/synthetic.py: one row group per
    episode, a new ~100 MB file when the next episode would pass 100 MB), made once; with
    `row_groups="file"`, each of those files is one row group."""
    import math

    from accelkit.stats.formats.synthetic import write_sample_dataset

    tag = ("" if columns == "smooth" else f"_{columns}") + (
        "" if row_groups == "episode" else "_1rg"
    )
    root = data_dir / f"lerobot_v30_f{frames}_e{frames_per_episode}_d14{tag}"
    marker = root / "bench_done.json"
    if not marker.is_file():
        shutil.rmtree(root, ignore_errors=True)
        started = time.perf_counter()
        write_sample_dataset(
            root,
            episodes=math.ceil(frames / frames_per_episode * 1.03) + 2,
            frames_per_episode=frames_per_episode,
            layout="v3.0",
            columns=columns,
            row_groups=row_groups,
        )
        files = sorted((root / "data").rglob("*.parquet"))
        info = {
            "layout": "v3.0",
            "columns": columns,
            "row_groups": row_groups,
            "frames": json.loads((root / "meta" / "info.json").read_text())["total_frames"],
            "files": len(files),
            "bytes_on_disk": sum(p.stat().st_size for p in files),
            "generation_s": time.perf_counter() - started,
        }
        marker.write_text(json.dumps(info, indent=2))
    return root, json.loads(marker.read_text())


def ensure_v21(
    data_dir: Path, frames: int, frames_per_episode: int, columns: str = "smooth"
) -> tuple[Path, dict]:
    root, info = ensure_parquet_dataset(data_dir, frames, frames_per_episode, columns=columns)
    return root, {
        "columns": columns,
        **{k: info[k] for k in ("layout", "frames", "files", "bytes_on_disk")},
    }


def ensure_photos(data_dir: Path, count: int, seed: int = 0) -> Path:
    """`count` JPEG photos whose longer side is 400-900 px: random crops of the sample photos
    (scikit-image's and scikit-learn's), resized; made once."""
    import numpy as np
    from PIL import Image

    from accelkit.images.testing import photos

    folder = data_dir / f"limits_photos_{count}_s{seed}"
    if (folder / "done").is_file():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "jpg").mkdir(parents=True)
    rng = np.random.default_rng(seed)
    sources = list(photos().values())
    for i in range(count):
        image = sources[i % len(sources)]
        h, w = image.shape[:2]
        ch, cw = rng.integers(h // 2, h + 1), rng.integers(w // 2, w + 1)
        y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
        crop = Image.fromarray(image[y : y + ch, x : x + cw])
        scale = rng.integers(400, 901) / max(crop.size)
        crop = crop.resize((max(1, round(crop.width * scale)), max(1, round(crop.height * scale))))
        crop.save(folder / "jpg" / f"{i:06d}.jpg", quality=90)
    (folder / "done").write_text("ok")
    return folder


def ensure_tensors(data_dir: Path, photos: Path, count: int = 256) -> Path:
    """Ready model inputs for the model floor: `count` photos resized to 224x224, normalized,
    float32 NCHW (their content does not change the model's time)."""
    import numpy as np
    from PIL import Image

    path = data_dir / f"limits_tensors_{count}.npy"
    if path.is_file():
        return path
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    files = sorted((photos / "jpg").glob("*.jpg"))[:count]
    ready = np.stack(
        [
            ((np.asarray(Image.open(f).convert("RGB").resize((224, 224)), np.float32) / 255 - mean)
             / std).transpose(2, 0, 1)
            for f in files
        ]
    ).astype(np.float32)  # fmt: skip
    np.save(path, ready)
    return path


def milvus_server(stack, prefix: str):
    """A real Milvus server for a benchmark's `--server`, in `stack` (a contextlib.ExitStack):
    started in a temporary folder (stopped and removed with the stack); exits with one line when
    this machine cannot run one. Returns the running `tests.support.milvus_server.MilvusServer`."""
    from tests.support.milvus_server import MilvusServer, unavailable

    reason = unavailable()
    if reason:
        sys.exit(f"error: --server: {reason}")
    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix))
    return stack.enter_context(MilvusServer(Path(folder) / "milvus"))
