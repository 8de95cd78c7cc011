"""A dead Milvus server under `accelkit images serve`, measured (docs/reliability.md).

One real Milvus server (tests/support/milvus_server.py: loopback-only, needs root) and the service
on 127.0.0.1. Three outages, one after another:

1. `server`: under inserts and searches, the Milvus process is SIGKILLed, left down `--down`
   seconds and started again on the same data and port. Measured: seconds of 503s, errors by
   status, the slowest answer, how long after the server is back the first insert and search
   succeed; checked: every acknowledged insert is stored exactly once.
2. `cli`: `accelkit images insert` of `--images` files while the server is SIGKILLed: its exit
   code and its one line; the server back, the same command again: exit 0, each image once.
3. `service`: the service SIGKILLed under inserts and started again: every insert it
   acknowledged is stored exactly once.
4. `migrate`: `accelkit images migrate` of a Milvus Lite file of `--items` items (1280-d, seeded)
   into the server, which is SIGKILLed mid-copy: the command's exit code and its one line; the
   server back, the same command again (each try's exit and line, until exit 0): resumed after
   its mark and verified; every item once, its vector bit-equal to the Lite file's, its metadata
   equal.

    python -m benchmarks.reliability.outage [--down 15] [--images 600] [--out benchmarks/results/outage.json]
    python -m benchmarks.reliability.outage --phases migrate --merge    # one phase; the others' results kept
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import REPO, ArgumentParser, fail, listed, out_file, positive

KEY = "outage-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}
DB = "outage"
STORE_TIMEOUT = 10.0
PHASES = ("server", "cli", "service", "migrate")


def create(url: str, name: str) -> None:
    from tests.support.outage import create_collection

    create_collection(url, name, HEADERS).raise_for_status()


def kill_under(server, command: list[str], collection: str, at_least: int):
    """Run `command`, SIGKILL the server once `collection` holds `at_least` rows, let the command
    end, start the server again: (process, rows at the kill, seconds until the kill, its stderr,
    seconds it took to end after the kill, seconds the restart took)."""
    from tests.support.outage import wait_for_rows

    first = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    started = time.monotonic()
    at_kill = wait_for_rows(server.uri, DB, collection, first, at_least=at_least)
    waited = time.monotonic() - started
    server.kill()
    killed = time.monotonic()
    _, err = first.communicate(timeout=600)
    failed_after = time.monotonic() - killed
    return first, at_kill, waited, err, failed_after, server.restart()


def rerun(command: list[str], tries: int = 6):
    """The same command again, as its line says, until it ends (at most `tries`, 5 s apart: a
    restarted server loads the collection again, which can take longer than store.timeout):
    (the last run, each try's exit code and last line)."""
    reruns = []
    for _ in range(tries):
        second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
        lines = second.stderr.strip().splitlines()
        reruns.append({"exit_code": second.returncode, "last_line": lines[-1] if lines else ""})
        if second.returncode == 0:
            break
        time.sleep(5)
    return second, reruns


def once(counts, ids: list[str]) -> dict:
    return {
        "acknowledged": len(ids),
        "missing": sum(1 for i in ids if counts[i] == 0),
        "doubled": sum(1 for i in ids if counts[i] > 1),
    }


def server_phase(server, url: str, down_s: float) -> dict:
    from tests.support.outage import Load, figures, server_outage, stored_counts

    create(url, "outage")
    load = Load(url, HEADERS, "outage", 1280, threads=3, timeout=STORE_TIMEOUT * 3)
    killed, back = server_outage(server, load, warm_s=10.0, down_s=down_s)
    result = figures(load.answers, killed, back)
    result["stored"] = once(
        stored_counts(server.uri, DB, "outage", load.acknowledged), load.acknowledged
    )
    return result


def cli_phase(server, config: Path, folder: Path, images: int) -> dict:
    from tests.support.outage import stored_counts, tile

    pictures = folder / "pictures"
    pictures.mkdir()
    for i in range(images):
        (pictures / f"{i:05d}.png").write_bytes(tile(10_000_000 + i))
    command = [
        sys.executable, "-m", "accelkit", "images", "insert", str(pictures),
        "--collection", "cli", "--create-collection", "--config", str(config), "--no-progress",
    ]  # fmt: skip
    # killed once the first chunk (256) is stored
    first, _, waited, err, failed_after, restart_s = kill_under(server, command, "cli", 1)
    second, reruns = rerun(command)  # as its line says, while the server reloads the collection
    import hashlib

    # the documented id of an image inserted without --ids: SHA-256 of its bytes, 32 hex digits
    ids = [hashlib.sha256(p.read_bytes()).hexdigest()[:32] for p in sorted(pictures.iterdir())]
    counts = stored_counts(server.uri, DB, "cli", ids)
    return {
        "images": images,
        "first_chunk_stored_after_s": round(waited, 2),
        "first_exit_code": first.returncode,
        "first_stderr_lines": err.strip().splitlines()[-3:],
        "first_failed_after_kill_s": round(failed_after, 2),
        "server_restart_s": round(restart_s, 2),
        "reruns": reruns,
        "rerun_exit_code": second.returncode,
        "rerun_stderr": second.stderr.strip().splitlines()[-3:],
        "rows_in_collection": sum(counts.values()),
        "stored": once(counts, ids),
    }


def service_phase(server, service, url: str) -> dict:
    from tests.support.outage import Load, stored_counts

    create(url, "crash")
    load = Load(url, HEADERS, "crash", 1280, threads=3, prefix="crash").start()
    started = time.monotonic()
    while len(load.acknowledged) < 10 and time.monotonic() - started < 300:
        time.sleep(0.2)
    service.process.send_signal(signal.SIGKILL)
    service.process.wait()
    load.stop()
    before = list(load.acknowledged)
    restarted = time.monotonic()
    service.start()
    restart_s = time.monotonic() - restarted
    after = Load(url, HEADERS, "crash", 1280, threads=2, prefix="after").start()
    time.sleep(5)
    after.stop()
    ids = before + after.acknowledged
    counts = stored_counts(server.uri, DB, "crash", ids)
    return {
        "acknowledged_before_kill": len(before),
        "acknowledged_after_restart": len(after.acknowledged),
        "service_restart_s": round(restart_s, 2),
        "answers_before_kill": dict(sorted(_count(load.answers).items())),
        "stored": once(counts, ids),
    }


MIGRATE_DIM = 1280


def lite_source(path: Path, items: int) -> np.ndarray:
    """A Milvus Lite file holding collection `bulk`: `items` seeded vectors, ids `00000000`...,
    metadata {"i": i}; returns the vectors."""
    from accelkit.images.settings.config import StoreConfig
    from accelkit.images.store import VectorStore

    vectors = np.random.default_rng(47).standard_normal((items, MIGRATE_DIM)).astype(np.float32)
    with VectorStore(StoreConfig(uri=str(path))) as store:
        store.create_collection("bulk", MIGRATE_DIM, index_type="FLAT", metric_type="COSINE")
        for start in range(0, items, 2000):
            part = range(start, min(start + 2000, items))
            store.upsert("bulk", [f"{i:08d}" for i in part], vectors[start : part[-1] + 1],
                         [{"i": i} for i in part])  # fmt: skip
        store.flush("bulk")
    return vectors


def read_back(uri: str, db_name: str, ids: list[str]) -> dict[str, tuple]:
    """Each row of `bulk` on the server by id: (vector as float32 bytes, metadata), 500 a query."""
    from pymilvus import MilvusClient

    client = MilvusClient(uri=uri, timeout=60, db_name=db_name)
    rows: dict[str, list] = {}
    try:
        client.load_collection("bulk")
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            for row in client.query(
                "bulk",
                filter=f"id in {list(part)!r}".replace("'", '"'),
                output_fields=["id", "vector", "metadata"],
                consistency_level="Strong",
            ):
                vector = np.asarray(row["vector"], np.float32).tobytes()
                rows.setdefault(row["id"], []).append((vector, row["metadata"]))
    finally:
        client.close()
    return rows


def migrate_phase(server, config: Path, folder: Path, items: int) -> dict:

    source = folder / "migrate.db"
    vectors = lite_source(source, items)
    command = [
        sys.executable, "-m", "accelkit", "images", "migrate", str(source), server.uri,
        "--target-db", DB, "--collection", "bulk", "--config", str(config), "--no-progress",
    ]  # fmt: skip
    first, at_kill, waited, err, failed_after, restart_s = kill_under(
        server, command, "bulk", items // 5
    )
    again = time.monotonic()
    second, reruns = rerun([*command, "--json"])
    rerun_s = time.monotonic() - again
    try:
        report = json.loads(second.stdout)["result"]["collections"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        report = {"stdout": second.stdout[-2000:]}
    ids = [f"{i:08d}" for i in range(items)]
    rows = read_back(server.uri, DB, ids)
    return {
        "items": items,
        "dim": MIGRATE_DIM,
        "rows_when_killed_at_least": at_kill,
        "killed_after_s": round(waited, 2),
        "first_exit_code": first.returncode,
        "first_stderr_lines": err.strip().splitlines()[-3:],
        "first_failed_after_kill_s": round(failed_after, 2),
        "server_restart_s": round(restart_s, 2),
        "reruns": reruns,
        "rerun_exit_code": second.returncode,
        "reruns_s": round(rerun_s, 2),
        "rerun_report": report,
        "rows_in_collection": sum(len(r) for r in rows.values()),
        "stored": {
            "items": items,
            "missing": sum(1 for i in ids if i not in rows),
            "doubled": sum(1 for i in ids if len(rows.get(i, ())) > 1),
            "not_bit_equal": sum(
                1
                for n, i in enumerate(ids)
                if any(r != (vectors[n].tobytes(), {"i": n}) for r in rows.get(i, ()))
            ),
        },
    }


def _count(answers) -> dict:
    from collections import Counter

    return Counter(str(a.status) for a in answers)


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--down", type=positive(float), default=15.0, help="seconds the server stays down"
    )
    parser.add_argument("--images", type=positive(), default=600, help="images of the CLI insert")
    parser.add_argument("--items", type=positive(), default=20_000, help="items of the migration")
    parser.add_argument("--phases", type=listed(PHASES), default=",".join(PHASES))
    parser.add_argument("--out", type=out_file, default=REPO / "benchmarks/results/outage.json")
    parser.add_argument(
        "--merge", action="store_true", help="keep the other phases' results already in --out"
    )
    args = parser.parse_args()
    previous = {}
    if args.merge and not args.out.exists():
        fail(
            f"argument --merge: {args.out} does not exist, so there is nothing to merge; drop --merge"
        )
    if args.merge:  # read before the run: a bad file fails now, not after
        try:
            previous = json.loads(args.out.read_text())
        except (OSError, ValueError) as exc:
            fail(
                f"argument --merge: {args.out} is not readable JSON ({exc}); fix it or drop --merge"
            )

    from tests.support.milvus_server import MilvusServer, server_database, unavailable
    from tests.support.service import Server

    from accelkit.images.embedding.models import cached_onnx_path
    from accelkit.runtime.environment import record
    from accelkit.runtime.files import write_json_atomic

    reason = unavailable()
    if reason:
        sys.exit(f"error: {reason}")
    load_start = os.getloadavg()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="accelkit-outage-") as tmp:
        folder = Path(tmp)
        onnx = cached_onnx_path(folder / "onnx")
        with MilvusServer(folder / "milvus") as server:
            server_database(server, DB)
            from tests.support.outage import service_config

            store = {"uri": server.uri, "db_name": DB, "timeout": STORE_TIMEOUT}
            config = service_config(folder, onnx, store, KEY)
            phases = args.phases.split(",")
            service = Server(config, folder / "service.log")
            if {"server", "service"} & set(phases):
                service.start()
            try:
                if "server" in phases:
                    results["server"] = server_phase(server, service.url, args.down)
                    print("server:", results["server"], flush=True)
                if "cli" in phases:
                    results["cli"] = cli_phase(server, config, folder, args.images)
                    print("cli:", results["cli"], flush=True)
                if "service" in phases:
                    results["service"] = service_phase(server, service, service.url)
                    print("service:", results["service"], flush=True)
                if "migrate" in phases:
                    results["migrate"] = migrate_phase(server, config, folder, args.items)
                    print("migrate:", results["migrate"], flush=True)
            finally:
                if service.process is not None:
                    service.stop()
                    print((folder / "service.log").read_text()[-3000:])
    environment = {
        **record(("numpy", "pymilvus", "milvus", "httpx")),
        "load_avg_start": load_start,
        "load_avg_end": os.getloadavg(),
    }
    settings = {"down_s": args.down, "store_timeout_s": STORE_TIMEOUT}
    if previous:  # the phases run now, each with its own environment
        payload = previous
        for name, result in results.items():
            payload[name] = {**result, "environment": environment, "settings": settings}
    else:
        payload = {"environment": environment, "settings": settings, **results}
    write_json_atomic(args.out, payload, trailing_newline=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
