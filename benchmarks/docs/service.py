"""The Milvus server tables of docs/images.md and docs/performance.md, rendered from
benchmarks/results/service_bench_server.json (`python -m benchmarks.images.service_bench
--server`; never typed). `TABLES` names them for the docs engine (`python -m benchmarks.docs`)."""

from __future__ import annotations

from benchmarks.common import REPO
from benchmarks.docs.blocks import Table

SERVER = REPO / "benchmarks" / "results" / "service_bench_server.json"

STAGES = {
    "create": "create the collection (schema, index, load)",
    "upsert": "upsert (1,000-row batches, 2 threads)",
    "first_search_session": "first search right after the upsert (Session: waits for its own rows)",
    "flush_and_apply": "flush, and wait until the query nodes applied the rows",
    "index_build_and_handoff": "HNSW build on the sealed segments + hand-off to the query node",
    "searches_no_filter": "200 searches, no filter",
    "searches_filter": "200 searches, filter (10 % match)",
}


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _hnsw(doc: dict) -> dict:
    return doc["server"]["clustered"]["indexes"]["HNSW"]


def _context(doc: dict) -> str:
    env = doc.get("environment", {})
    start = env.get("load_avg_start", ["?"])[0]
    end = (doc.get("load_avg_end") or ["?"])[0]
    n = doc["server"]["clustered"]["vectors"]
    return (
        f"({n:,} × 1280-d clustered vectors, {doc['server']['clustered'].get('server_version', '?')}"
        f" server, pymilvus {doc['server']['clustered'].get('pymilvus', '?')}; written"
        f" {env.get('time_utc', '?')}; load average {start:.1f} at the start, {end:.1f} at the end;"
        f" the whole run {doc['minutes']:.1f} min.)"
    )


def server_stages(doc: dict) -> str:
    """| stage | wall | client CPU | server CPU |"""
    stages = _hnsw(doc)["stages"]
    lines = ["| stage (HNSW) | wall, s | client CPU, s | server CPU, s |", "|---|---|---|---|"]
    for key, label in STAGES.items():
        if key in stages:
            st = stages[key]
            lines.append(
                f"| {label} | {st['wall_s']:.2f} | {st['client_cpu_s']:.2f} | {_s(st['server_cpu_s'])} |"
            )
    segments = _hnsw(doc).get("segments")
    if segments:
        lines.append(
            f"\nSealed segments served after the build: {len(segments)} ({', '.join(f'{s:,}' for s in segments)} rows). "
            + _context(doc)
        )
    return "\n".join(lines)


def server_visibility(doc: dict) -> str:
    """| read | upsert | first search | sees the last row | visible to Eventually after |"""
    vis = doc["visibility"]
    lines = [
        "| right after a bulk upsert of "
        f"{vis['vectors']:,} rows | upsert, s | first search, ms | sees the last row | "
        "an Eventually read sees it after, s |",
        "|---|---|---|---|---|",
    ]
    for level, entry in vis["levels"].items():
        if level.startswith("bulk_path"):
            continue
        first = entry["first_search"]
        lines.append(
            f"| {level} | {entry['upsert']['wall_s']:.2f} | {_ms(first['wall_s'] * 1000)} | "
            f"{'yes' if first['sees_last'] else 'no'} | {entry['visible_to_eventually_after_s']:.2f} |"
        )
    for level, flush in (("bulk_path_plain_flush", "Milvus' flush alone"), ("bulk_path", "flush")):
        bulk = vis["levels"].get(level)
        if not bulk:
            continue
        for who, label in (("same_client", "this client"), ("other_client", "another client")):
            first = bulk[f"first_search_{who}"]
            lines.append(
                f"| **upsert + {flush}, then {label}** | "
                f"{bulk['upsert']['wall_s']:.2f} + {bulk['flush_and_apply']['wall_s']:.2f} | "
                f"**{_ms(first['wall_s'] * 1000)}** | {'yes' if first['sees_last'] else 'no'} | — |"
            )
    return "\n".join(lines)


def server_search(doc: dict) -> str:
    """HNSW searches and the same run's baselines, with the targets."""
    hnsw = _hnsw(doc)
    search = hnsw["search"]
    factor = doc["server"]["clustered"].get("filtered_ef_factor", 1)
    ef = 64
    rows = [
        ("no filter (ef 64)", search["no_filter"]),
        (f"filter, 10 % match (ef {ef} × {factor} = {ef * factor})", search["filter"]),
        (f"filter, baseline: the plain ef {ef}", search.get("filter_unscaled_ef")),
        ("off-data (random) queries, no filter", search["random_queries"]),
        ("Strong consistency, no filter", search["strong_consistency"]),
    ]
    lines = [
        "| HNSW (M 16, efConstruction 200) | p50, ms | p99, ms | recall@10 |",
        "|---|---|---|---|",
    ]
    for label, r in rows:
        if r:
            lines.append(
                f"| {label} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['recall_at_10']:.3f} |"
            )
    for key in sorted((k for k in search if k.startswith("ef")), key=lambda k: int(k[2:])):
        for kind in ("no_filter", "filter"):
            r = search[key][kind]
            walk = f"ef {key[2:]}" + (f" (× {factor})" if kind == "filter" else "")
            lines.append(
                f"| sweep: {walk}, {kind.replace('_', ' ')} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['recall_at_10']:.3f} |"
            )
    lite = doc.get("lite_flat_same_run")
    if lite:
        for kind in ("no_filter", "filter"):
            r = lite["search"][kind]
            lines.append(
                f"| Milvus Lite FLAT, same run, {kind.replace('_', ' ')} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['recall_at_10']:.3f} |"
            )
    lines.append(
        f"\nUpsert: {hnsw['insert_vectors_per_s']:,.0f} vectors/s on the server"
        + (f", {lite['insert_vectors_per_s']:,.0f} on Milvus Lite in the same run" if lite else "")
        + ". "
        + _context(doc)
    )
    return "\n".join(lines)


def _met(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def server_targets(doc: dict) -> str:
    """One row per server target: measured, target, met."""
    t = doc["targets"]
    hnsw = _hnsw(doc)
    search = hnsw["search"]
    bulk = doc["visibility"]["levels"]["bulk_path"]["first_search_other_client"]["wall_s"] * 1000
    session = doc["visibility"]["levels"]["Session"]["first_search"]["wall_s"] * 1000
    rows = [
        (
            f"first search after a bulk insert of {doc['visibility']['vectors']:,} rows (upsert + flush), another client",
            f"{_ms(bulk)} ms (sees every row); baseline: Session right after the upsert {_ms(session)} ms",
            f"≤ {t['first_search_after_bulk_insert_ms']:.0f} ms",
            bulk <= t["first_search_after_bulk_insert_ms"],
        ),
        (
            "HNSW top-10 p99 (recall@10)",
            f"{search['no_filter']['p99_ms']:.1f} ms ({search['no_filter']['recall_at_10']:.3f})",
            f"< {t['hnsw_p99_ms']:.0f} ms",
            search["no_filter"]["p99_ms"] < t["hnsw_p99_ms"],
        ),
        (
            "filtered top-10 p99 (recall@10)",
            f"{search['filter']['p99_ms']:.1f} ms ({search['filter']['recall_at_10']:.3f})",
            f"< {t['filtered_p99_ms']:.0f} ms",
            search["filter"]["p99_ms"] < t["filtered_p99_ms"],
        ),
        (
            "upsert",
            f"{hnsw['insert_vectors_per_s']:,.0f} vectors/s",
            f"≥ {t['insert_vectors_per_s']:,.0f}/s",
            hnsw["insert_vectors_per_s"] >= t["insert_vectors_per_s"],
        ),
        (
            "`service_bench.py --server`, whole run",
            f"{doc['minutes']:.1f} min",
            f"≤ {t['benchmark_minutes']:.0f} min",
            doc["minutes"] <= t["benchmark_minutes"],
        ),
    ]
    n = doc["server"]["clustered"]["vectors"]
    lines = [
        f"| Milvus server, {n:,} × 1280 | measured | target | |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {_met(ok)} |" for a, b, c, ok in rows]
    lines.append("\n" + _context(doc))
    return "\n".join(lines)


TABLES = {
    "server-targets": Table(SERVER, server_targets),
    "server-stages": Table(SERVER, server_stages),
    "server-visibility": Table(SERVER, server_visibility),
    "server-search": Table(SERVER, server_search),
}
