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

    python benchmarks/outage.py [--down 15] [--images 600] [--out benchmarks/results/outage.json]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

KEY = "outage-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}
DB = "outage"
STORE_TIMEOUT = 10.0


def create(url: str, name: str) -> None:
    from tests.support.outage import create_collection

    create_collection(url, name, HEADERS).raise_for_status()


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
    from tests.support.outage import stored_counts, tile, wait_for_rows

    pictures = folder / "pictures"
    pictures.mkdir()
    for i in range(images):
        (pictures / f"{i:05d}.png").write_bytes(tile(10_000_000 + i))
    command = [
        sys.executable, "-m", "accelkit", "images", "insert", str(pictures),
        "--collection", "cli", "--create-collection", "--config", str(config), "--no-progress",
    ]  # fmt: skip
    first = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    started = time.monotonic()
    wait_for_rows(server.uri, DB, "cli", first)  # the first chunk (256) is stored
    waited = time.monotonic() - started
    server.kill()
    killed = time.monotonic()
    _, err = first.communicate(timeout=600)
    failed_after = time.monotonic() - killed
    restart_s = server.restart()
    second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
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


def _count(answers) -> dict:
    from collections import Counter

    return Counter(str(a.status) for a in answers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--down", type=float, default=15.0, help="seconds the server stays down")
    parser.add_argument("--images", type=int, default=600, help="images of the CLI insert")
    parser.add_argument("--phases", default="server,cli,service")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/outage.json")
    args = parser.parse_args()

    from tests.images.test_service import Server
    from tests.support.milvus_server import MilvusServer, server_database, unavailable

    from accelkit.images.models import cached_onnx_path
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
            service = Server(config, folder / "service.log").start()
            try:
                phases = args.phases.split(",")
                if "server" in phases:
                    results["server"] = server_phase(server, service.url, args.down)
                    print("server:", results["server"], flush=True)
                if "cli" in phases:
                    results["cli"] = cli_phase(server, config, folder, args.images)
                    print("cli:", results["cli"], flush=True)
                if "service" in phases:
                    results["service"] = service_phase(server, service, service.url)
                    print("service:", results["service"], flush=True)
            finally:
                service.stop()
                print((folder / "service.log").read_text()[-3000:])
    payload = {
        "environment": {
            **record(("numpy", "pymilvus", "milvus", "httpx")),
            "load_avg_start": load_start,
            "load_avg_end": os.getloadavg(),
        },
        "settings": {"down_s": args.down, "store_timeout_s": STORE_TIMEOUT},
        **results,
    }
    write_json_atomic(args.out, payload, trailing_newline=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
