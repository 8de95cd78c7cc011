"""A longer fuzz of `accelkit images serve` than the suite's: schemathesis generates
requests from the service's own OpenAPI document, route by route, and every answer is checked as
tests/images/service/test_service_fuzz.py checks it (no 5xx, a documented status and content type, a body
matching the documented schema, every refusal naming its field).

    python -m benchmarks.reliability.fuzz_service                      # 200 cases per route
    python -m benchmarks.reliability.fuzz_service --cases 1000 --seed 7

The service runs as users run it (a subprocess on 127.0.0.1, Milvus Lite in a temporary folder,
the real model from the user cache), and is stopped by its PID. Writes JSON to
benchmarks/results/fuzz_service.json (or --output): cases run per route, the failures (distinct
per route and check, with a curl line to reproduce them) and the service log's tracebacks.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks.common import (
    REPO,
    ArgumentParser,
    out_file,
    positive,
    whole_number,
)

SCHEMA = "accelkit.fuzz_service/1"


def fuzz(operation, route: str, url: str, args, cases, statuses, failures) -> None:
    """`args.cases` generated requests to one operation, each answer checked; failures recorded
    (distinct per route, kind and first line), the run goes on."""
    from hypothesis import HealthCheck, Phase, given, seed, settings
    from tests.support.service import AUTH
    from tests.support.service_fuzz import CHECKS, error_names_its_field

    @seed(args.seed)
    @settings(
        max_examples=args.cases,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(case=operation.as_strategy())
    def run(case):
        cases[route] += 1
        response = case.call(base_url=url, headers=AUTH, timeout=120)
        statuses[str(response.status_code)] += 1
        try:
            case.validate_response(response, checks=CHECKS)
            error_names_its_field(case, response)
        except Exception as exc:  # recorded, and the run goes on
            first = next((line for line in str(exc).splitlines() if line.strip()), "")
            failures.setdefault(
                (route, type(exc).__name__, first),
                {
                    "route": route,
                    "status": response.status_code,
                    "failure": str(exc)[:2000],
                    "curl": case.as_curl_command(headers={"Authorization": "***"}),
                },
            )

    run()


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=positive(), default=200, help="generated cases per route")
    parser.add_argument("--seed", type=whole_number, default=47)
    parser.add_argument(
        "--output", type=out_file, default=str(REPO / "benchmarks/results/fuzz_service.json")
    )
    args = parser.parse_args()

    import numpy as np
    import schemathesis
    from PIL import Image
    from tests.support.service import Server
    from tests.support.service_fuzz import service_config

    from accelkit.images.embedding.models import cached_onnx_path
    from accelkit.runtime.files import write_json_atomic

    with tempfile.TemporaryDirectory(prefix="accelkit-fuzz-") as folder:
        base = Path(folder)
        allowed = base / "allowed"
        allowed.mkdir()
        rng = np.random.default_rng(args.seed)
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(allowed / "a.jpg")
        config = base / "service.yaml"
        config.write_text(service_config(base, cached_onnx_path(), allowed))
        server = Server(config, base / "server.log").start()
        started = time.perf_counter()
        cases: Counter = Counter()
        statuses: dict[str, Counter] = {}
        failures: dict[tuple[str, str], dict] = {}
        try:
            schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
            for result in schema.get_all_operations():
                operation = result.ok()
                route = f"{operation.method.upper()} {operation.path}"
                statuses[route] = Counter()

                fuzz(operation, route, server.url, args, cases, statuses[route], failures)
                print(f"{route}: {cases[route]} cases, {dict(statuses[route])}", flush=True)
        finally:
            code = server.stop()
        log = (base / "server.log").read_text(errors="replace")
        report = {
            "schema": SCHEMA,
            "seed": args.seed,
            "cases_per_route_asked": args.cases,
            "cases_run": sum(cases.values()),
            "cases_per_route": dict(cases),
            "statuses_per_route": {k: dict(v) for k, v in statuses.items()},
            "failures": list(failures.values()),
            "server_tracebacks": log.count("Traceback"),
            "server_exit_code": code,
            "seconds": round(time.perf_counter() - started, 1),
        }
    write_json_atomic(args.output, report, trailing_newline=True)
    print(
        f"{report['cases_run']} cases over {len(cases)} routes, {len(failures)} distinct"
        f" failures, {report['server_tracebacks']} tracebacks in the service log; {args.output}"
    )


if __name__ == "__main__":
    main()
