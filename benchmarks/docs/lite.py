"""The Milvus Lite 2.5-or-3 tables of docs/images.md, rendered from
benchmarks/results/lite_engines.json (`python -m benchmarks.images.lite_engines`; never typed).
`TABLES` names them for the docs engine (`python -m benchmarks.docs`, blocks.py)."""

from __future__ import annotations

from benchmarks.common import REPO
from benchmarks.docs.blocks import Table

RESULT = REPO / "benchmarks" / "results" / "lite_engines.json"
ENGINES = {"lite2": "Lite 2.5", "lite3": "Lite 3"}


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _mb(kib: float | None) -> str:
    return "?" if kib is None else f"{kib / 1024:,.0f}"


def _runs(doc: dict):
    """(size, engine key, worker result) in the run's order."""
    for size, engines in doc["sizes"].items():
        for key, result in engines.items():
            yield int(size), key, result


def _context(doc: dict) -> str:
    env = doc["environment"]
    versions = "; ".join(
        f"{ENGINES[key]}: milvus-lite {r['versions']['milvus-lite']}"
        + (f", faiss-cpu {r['versions']['faiss-cpu']}" if r["versions"].get("faiss-cpu") else "")
        for key, r in next(iter(doc["sizes"].values())).items()
        if "versions" in r
    )
    pymilvus = env["versions"].get("pymilvus", "?")
    s = doc["settings"]
    inputs = ", ".join(
        f"{size:,} rows {r['rss_kib']['inputs_bytes'] / 2**20:,.0f} MB"
        for size, engines in ((int(k), v) for k, v in doc["sizes"].items())
        for r in [
            next(
                (
                    i
                    for e in engines.values()
                    for i in e.get("indexes", {}).values()
                    if "rss_kib" in i
                ),
                None,
            )
        ]
        if r
    )
    own = all(
        i.get("rss_kib", {}).get("own_process", False)
        for _, _, r in _runs(doc)
        for i in r.get("indexes", {}).values()
        if "rss_kib" in i
    )
    rss = (
        "of the process that measured the collection (one per index type)"
        if own
        else "of the process that measured the engine, over one collection's phase (FLAT, then"
        " HNSW: the HNSW phase begins with what the closed FLAT store left)"
    )
    cut = "" if doc.get("complete") else " **The run was cut short: only the sizes shown.**"
    return (
        f"({versions}; pymilvus {pymilvus}; {s['dim']}-d clustered unit vectors, {s['metric']},"
        f" top-{s['topk']}, filter `{s['filter']}` ({s['filter_selectivity']:.0%} match); up to"
        f" {s['queries']} queries a measurement, fewer where one ran past {s['budget_s']:.0f} s"
        f" (n in the table); peak RSS: {rss}, from what it held when it began, which includes"
        f" the vectors ({inputs}); written {env['time_utc']} on {env['cpu_count']} cores, load average"
        f" {env['load_avg_start'][0]:.1f} at the start, {doc['load_avg_end'][0]:.1f} at the end;"
        f" {doc['minutes']:.0f} min; `{doc['command']}`.){cut}"
    )


def engines_table(doc: dict) -> str:
    """One row per size, engine and index type."""
    lines = [
        "| rows | engine | index | insert + flush, rows/s | indexed after, s | p50 / p99, ms (n)"
        " | 10 per call, ms/query | recall@10 | filtered p50 / p99, ms (n) | filtered recall@10"
        " | first search after +1,000 rows, ms | disk, MB | peak RSS, MB | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    refusals = set()
    for size, key, result in _runs(doc):
        if "failed" in result:
            lines.append(f"| {size:,} | {ENGINES[key]} | — | failed: {result['failed']} |")
            continue
        # the 1-minute load average before and after this engine's worker (the machine is shared)
        load = f"{result['load_avg_before'][0]:.1f} → {result['load_avg_after'][0]:.1f}"
        for index_type, r in result["indexes"].items():
            head = f"| {size:,} | {ENGINES[key]} | {index_type} |"
            if "failed" in r:
                lines.append(f"{head} failed: {r['failed']} |" + " |" * 10)
                continue
            if "refused" in r:
                refusals.add((ENGINES[key], index_type, r["refused"]))
                lines.append(f"{head} refused (below) |" + " |" * 10)
                continue
            single, filtered = r["search"]["single"], r["search"]["filtered"]
            # the process's peak over this collection's phase, from what it held at the start
            # (the vectors, and what the previous phase's closed store kept)
            rss = f"{_mb(r['rss_kib']['peak'])} (from {_mb(r['rss_kib']['at_start'])})"
            engine = [k for k in r.get("engine_children_peak_rss_kib") or [] if k]
            if engine:
                rss += f" + {_mb(sum(engine))} engine"
            lines.append(
                f"{head} {r['insert']['rows_per_s']:,.0f} | {r['wait_for_index_s']:.1f} |"
                f" {_ms(single['p50_ms'])} / {_ms(single['p99_ms'])} ({single['queries']}) |"
                f" {_ms(r['search']['batched']['ms_per_query'])} | {single['recall_at_10']:.3f} |"
                f" {_ms(filtered['p50_ms'])} / {_ms(filtered['p99_ms'])} ({filtered['queries']}) |"
                f" {filtered['recall_at_10']:.3f} | {_ms(r['after_upsert']['first_search_ms'])} |"
                f" {r['disk']['du_bytes'] / 2**20:,.0f} | {rss} | {load} |"
            )
    for engine, index_type, reason in sorted(refusals):
        lines.append(f"\n{engine} {index_type}: accelkit refuses it — “{reason}”.")
    lines.append("\n" + _context(doc))
    return "\n".join(lines)


def durability_table(doc: dict) -> str:
    """The SIGKILLed writer's rows, reopened."""
    lines = [
        "| engine (run at) | rows acknowledged, then SIGKILL | rows after reopening |"
        " 20 sampled vectors as sent | reopen + count, s |",
        "|---|---|---|---|---|",
    ]
    for size, key, result in _runs(doc):
        d = result.get("durability") or {"failed": "not run"}
        if "failed" in d:
            lines.append(f"| {ENGINES[key]} ({size:,}) | failed: {d['failed']} | | | |")
            continue
        diff = d["sampled_max_abs_diff"]
        same = (
            "**no**"
            if not d["sampled_vectors_equal"]
            else "yes, bit for bit"
            if diff == 0
            else "yes"
        )
        lines.append(
            f"| {ENGINES[key]} ({size:,}) | {d['acknowledged']:,} | {d['count_after_reopen']:,} |"
            f" {same if diff == 0 else f'{same} (largest difference {diff:.1e})'} |"
            f" {d['reopen_and_count_s']:.2f} |"
        )
    return "\n".join(lines)


def ratios(doc: dict) -> str:
    """Lite 3 against Lite 2.5's FLAT (the default), same run, per size: the figures a default
    is chosen from (times: above 1× is Lite 3 slower; the insert rate: below 1×)."""
    lines = [
        "Lite 3 against Lite 2.5 FLAT in the same run (times: above 1× means Lite 3 is"
        " slower; insert rates: below 1× means Lite 3 is slower):",
        "",
    ]
    for size, engines in doc["sizes"].items():
        base = (engines.get("lite2") or {}).get("indexes", {}).get("FLAT")
        if not base or "search" not in base:
            continue
        for index_type, r in ((engines.get("lite3") or {}).get("indexes") or {}).items():
            if "search" not in r:
                continue

            def x(path: tuple[str, str], r=r, base=base) -> str:
                return f"{r['search'][path[0]][path[1]] / base['search'][path[0]][path[1]]:.2f}×"

            lines.append(
                f"* {int(size):,} rows, Lite 3 {index_type}: single-query"
                f" p50 {x(('single', 'p50_ms'))}, p99 {x(('single', 'p99_ms'))}; 10 per call"
                f" {x(('batched', 'ms_per_query'))}; filtered p99 {x(('filtered', 'p99_ms'))};"
                f" recall@10 {r['search']['single']['recall_at_10']:.3f} against"
                f" {base['search']['single']['recall_at_10']:.3f}; inserts"
                f" {r['insert']['rows_per_s'] / base['insert']['rows_per_s']:.2f}× the rate."
            )
    return "\n".join(lines) if len(lines) > 2 else "(no size with both engines)"


TABLES = {
    "lite-engines": Table(RESULT, engines_table),
    "lite-durability": Table(RESULT, durability_table),
    "lite-ratios": Table(RESULT, ratios),
}
