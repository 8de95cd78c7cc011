"""The workloads, baselines and measurements of `benchmarks/stats/stats_bench.py` (its docstring says
what each measures); the command line, the report and the table are there."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import ensure_parquet_dataset, log, machine, module_command, repo_env

SCHEMA = "accelkit.stats_bench/1"
QUANTILES = (0.01, 0.99)
IN_MEMORY_BATCH = 65536
GEN_BATCH = 65536
GIB = 1 << 30
MIB = 1 << 20

TARGETS = {
    "exact_vs_baseline_b": 50.0,
    "exact_vs_baseline_a": 1.0,
    "fast_vs_exact": 2.0,
    "parquet_frames_per_s": 1_000_000.0,
    "peak_rss_10m_bytes": float(GIB),
    "peak_rss_size_ratio": 1.10,  # peak(largest) / peak(smallest): "independent of size"
    "parquet_exact_vs_pyarrow_read": 0.8,  # the target: exact end to end vs pyarrow reading alone
    "many_files_exact_vs_baseline_a": 3.0,  # the target: >= 4M frames in >= 4,000 files
    "startup_overhead_s": 1.5,  # the target: whole `accelkit stats` on the sample minus bare imports
}


# --- data ---------------------------------------------------------------------------------------


def column_kinds(dim: int) -> list[str]:
    """Which distribution each column follows (the same plan for any dim >= 4)."""
    kinds = []
    for d in range(dim):
        f = d / dim
        kinds.append(
            "gaussian"
            if f < 0.5
            else "heavy_tailed"
            if f < 0.75
            else "gripper"
            if f < 0.875
            else "offset"
        )
    return kinds


def make_in_memory(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    """rows x dim float32: gaussian, heavy-tailed (t3, lognormal), 0/1 grippers, |mean| >> std."""
    rng = np.random.default_rng(seed)
    x = np.empty((rows, dim), np.float32)
    for d, kind in enumerate(column_kinds(dim)):
        if kind == "gaussian":
            x[:, d] = rng.normal(rng.uniform(-2, 2), rng.uniform(0.05, 3), rows)
        elif kind == "heavy_tailed":
            x[:, d] = rng.standard_t(3, rows) if d % 2 else rng.lognormal(0.0, 1.5, rows)
        elif kind == "gripper":
            x[:, d] = (rng.random(rows) < rng.uniform(0.2, 0.8)).astype(np.float32)
        else:  # a large offset with a small spread: float32 E[x^2] - E[x]^2 loses it
            x[:, d] = 1000.0 * (d + 1) + rng.normal(0.0, 0.01 * (d + 1), rows)
    return x


class GeneratedBatches:
    """A re-iterable of dict batches drawn afresh from a seeded rng: the same data on every pass,
    never all in memory at once."""

    def __init__(self, rows: int, dim: int, batch: int = GEN_BATCH, seed: int = 0):
        self.rows, self.dim, self.batch, self.seed = rows, dim, batch, seed
        scales = np.random.default_rng(seed + 1)
        self.loc = scales.uniform(-2, 2, dim).astype(np.float32)
        self.scale = scales.uniform(0.05, 3, dim).astype(np.float32)

    def __iter__(self):
        rng = np.random.default_rng(self.seed)
        for start in range(0, self.rows, self.batch):
            n = min(self.batch, self.rows - start)
            x = rng.standard_normal((n, self.dim), dtype=np.float32)
            x *= self.scale
            x += self.loc
            yield {"state": x}


# --- methods ------------------------------------------------------------------------------------


def baseline_a_arrays(arrays: dict[str, np.ndarray]) -> dict:
    out = {}
    for key, x in arrays.items():
        q = np.quantile(x, list(QUANTILES), axis=0)
        out[key] = {
            "quantiles": {QUANTILES[i]: q[i] for i in range(len(QUANTILES))},
            "mean": x.mean(axis=0),
            "std": x.std(axis=0),
            "min": x.min(axis=0),
            "max": x.max(axis=0),
        }
    return out


def baseline_a_in_memory(batches: list[dict]) -> dict:
    """Load (concatenate the batches), then numpy."""
    x = np.concatenate([b["state"] for b in batches])
    return baseline_a_arrays({"state": x})


def baseline_a_parquet(root: Path) -> dict:
    """pyarrow read of both columns of every file, then numpy."""
    import pyarrow.parquet as pq

    columns = {"state": "observation.state", "actions": "action"}
    parts: dict[str, list] = {k: [] for k in columns}
    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path, columns=list(columns.values()))
        for key, name in columns.items():
            col = table.column(name).combine_chunks()
            width = col.type.list_size
            parts[key].append(col.flatten().to_numpy().reshape(-1, width))
    return baseline_a_arrays({k: np.concatenate(v) for k, v in parts.items()})


class ReferenceRunningStats:
    """The reference tool's streaming statistics, re-implemented from its description.

    float32 running mean and mean of squares; per dimension a 5000-bin histogram over [min, max] of the
    first batch; whenever any dimension's min or max grows, every histogram is re-binned onto new edges
    (each old bin's count goes to the new bin holding its left edge); a quantile is the left edge of
    the bin holding rank q * count.
    """

    BINS = 5000

    def __init__(self):
        self.count = 0

    def update(self, batch: np.ndarray) -> None:
        n, dim = batch.shape
        if self.count == 0:
            self.mean = batch.mean(axis=0)
            self.mean_sq = (batch**2).mean(axis=0)
            self.min = batch.min(axis=0)
            self.max = batch.max(axis=0)
            self.hist = [np.zeros(self.BINS) for _ in range(dim)]
            self.edges = [
                np.linspace(self.min[d] - 1e-10, self.max[d] + 1e-10, self.BINS + 1)
                for d in range(dim)
            ]
        else:
            new_min, new_max = batch.min(axis=0), batch.max(axis=0)
            grew = bool(np.any(new_min < self.min) or np.any(new_max > self.max))
            self.min = np.minimum(self.min, new_min)
            self.max = np.maximum(self.max, new_max)
            if grew:
                for d in range(dim):
                    edges = np.linspace(self.min[d], self.max[d], self.BINS + 1)
                    self.hist[d], _ = np.histogram(
                        self.edges[d][:-1], bins=edges, weights=self.hist[d]
                    )
                    self.edges[d] = edges
        self.count += n
        self.mean += (batch.mean(axis=0) - self.mean) * (n / self.count)
        self.mean_sq += ((batch**2).mean(axis=0) - self.mean_sq) * (n / self.count)
        for d in range(dim):
            counts, _ = np.histogram(batch[:, d], bins=self.edges[d])
            self.hist[d] += counts

    def result(self) -> dict:
        std = np.sqrt(np.maximum(0.0, self.mean_sq - self.mean**2))
        qs = {}
        for q in QUANTILES:
            target = q * self.count
            qs[q] = np.array(
                [
                    e[np.searchsorted(np.cumsum(h), target)]
                    for h, e in zip(self.hist, self.edges, strict=True)
                ]
            )
        return {"quantiles": qs, "mean": self.mean, "std": std, "min": self.min, "max": self.max}


def baseline_b(x: np.ndarray, batch: int = 256) -> dict:
    stats = ReferenceRunningStats()
    for start in range(0, len(x), batch):
        stats.update(x[start : start + batch])
    return {"state": stats.result()}


def accelkit_stats(data, fast: bool):
    from accelkit.stats.engine.driver import compute_stats

    result = compute_stats(data, quantiles=QUANTILES, fast=fast, progress=False)
    out = {}
    for key, s in result.stats.items():
        out[key] = {
            "quantiles": dict(s.quantiles),
            "mean": s.mean,
            "std": s.std,
            "min": s.min,
            "max": s.max,
        }
    return out, result.summary


# --- measuring ----------------------------------------------------------------------------------


class Method:
    """One timed method of a workload: what to call and how many rows one call processes."""

    def __init__(self, name: str, fn, rows: int, warmup: bool = True):
        self.name, self.fn, self.rows, self.warmup = name, fn, rows, warmup
        self.value = None
        self.record: dict = {"rows": rows}
        self.load: list[float] = []
        self.summaries: list = []

    def call(self):
        self.value = self.fn()
        if (
            isinstance(self.value, tuple)
            and len(self.value) == 2
            and hasattr(self.value[1], "pass_seconds")
        ):
            self.summaries.append(self.value[1])
        return self.value


def timed_group(methods: list[Method], repeats: int, label: str) -> dict[str, Method]:
    """Warm up every method once (JAX compilation, page cache; reported as first_run_s), then run
    `repeats` interleaved rounds (`accelkit.runtime.timing.interleaved`), so that a change in the
    machine's load hits all methods alike. Reports medians of wall time and of process CPU time."""
    from accelkit.runtime.timing import interleaved

    by_name = {m.name: m for m in methods}

    def before(name: str, r: int) -> None:
        log(f"{label}: {name} " + ("(warm-up)" if r < 0 else f"(repeat {r + 1}/{repeats})"))
        if r >= 0:
            by_name[name].load.append(os.getloadavg()[0])

    timed = interleaved(
        {m.name: m.call for m in methods},
        repeats,
        warmup={m.name for m in methods if m.warmup},
        before=before,
    )
    for m in methods:
        if m.warmup and m.summaries:  # the warm-up call's pass summary is not a steady one
            m.summaries.pop(0)
        rec = m.record
        times, cpu = timed.wall[m.name], timed.cpu[m.name]
        rec["repeats"] = repeats
        rec["times_s"] = times
        rec["median_s"] = statistics.median(times)
        rec["rows_per_s"] = m.rows / rec["median_s"]
        rec["cpu_s"] = cpu
        rec["median_cpu_s"] = statistics.median(cpu)
        rec["rows_per_cpu_s"] = m.rows / rec["median_cpu_s"]
        rec["loadavg_1m_at_start"] = m.load
        if m.name in timed.first:
            rec["first_run_s"] = timed.first[m.name]
            rec["first_run_overhead_s"] = rec["first_run_s"] - rec["median_s"]
        if m.summaries:
            s = m.summaries[-1]
            rec["passes"], rec["batch_size"], rec["compiles"] = s.passes, s.batch_size, s.compiles
            rec["pass_seconds_median"] = [
                statistics.median(p)
                for p in zip(*[x.pass_seconds for x in m.summaries], strict=True)
            ]
            rec["internal_seconds_median"] = statistics.median(x.seconds for x in m.summaries)
    return by_name


def pyarrow_read(root: Path) -> int:
    """Baseline: pyarrow alone reading both columns of every file into numpy (nothing computed)."""
    import pyarrow.parquet as pq

    rows = 0
    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path, columns=["observation.state", "action"])
        for name in ("observation.state", "action"):
            col = table.column(name).combine_chunks()
            values = col.flatten().to_numpy().reshape(-1, col.type.list_size)
        rows += len(values)
    return rows


def read_only(stream) -> int:
    """Diagnostic: iterate a stream's chunks (read + decode + weights) without computing anything."""
    rows = 0
    for chunk in stream.chunks():
        rows += max(len(c.weight) for c in chunk.values())
    return rows


def truth_moments(x: np.ndarray) -> dict:
    """float64 mean and std of float32 data: the reference for moment errors."""
    x64 = x.astype(np.float64)
    return {"mean": x64.mean(axis=0), "std": x64.std(axis=0)}


def accuracy(result: dict, reference: dict, key: str, truth: dict | None = None) -> dict:
    """Quantiles: max over dims of |q - numpy.quantile| / std. Moments: errors against float64 truth."""
    ref = reference[key]
    moments = truth if truth is not None else {"mean": ref["mean"], "std": ref["std"]}
    std = np.asarray(moments["std"], np.float64)
    scale = np.where(std > 0, std, 1.0)
    out = {}
    for q in QUANTILES:
        err = (
            np.abs(
                np.asarray(result[key]["quantiles"][q], np.float64)
                - np.asarray(ref["quantiles"][q], np.float64)
            )
            / scale
        )
        out[f"q{q:g}_max_err_over_std"] = float(err.max())
        out[f"q{q:g}_worst_dim"] = int(err.argmax())
    out["max_err_over_std"] = max(out[f"q{q:g}_max_err_over_std"] for q in QUANTILES)
    rel = np.abs(np.asarray(result[key]["std"], np.float64) - std) / scale
    out["std_max_rel_err"] = float(rel.max())
    out["std_worst_dim"] = int(rel.argmax())
    mean_err = (
        np.abs(
            np.asarray(result[key]["mean"], np.float64) - np.asarray(moments["mean"], np.float64)
        )
        / scale
    )
    out["mean_max_err_over_std"] = float(mean_err.max())
    out["mean_worst_dim"] = int(mean_err.argmax())
    return out


def memory_child(rows: int, dim: int, fast: bool) -> None:
    """Runs in a subprocess: prints one JSON line with this process's peak RSS."""
    import jax  # noqa: F401  (imported before the baseline so the runtime is in it)

    from accelkit.stats.engine.driver import compute_stats

    data = GeneratedBatches(rows, dim)
    from accelkit.runtime.devices import peak_rss_bytes

    before = peak_rss_bytes()
    t = time.perf_counter()
    result = compute_stats(data, quantiles=QUANTILES, fast=fast, progress=False)
    seconds = time.perf_counter() - t
    s = result.stats["state"]
    print(
        json.dumps(
            {
                "rows": rows,
                "dim": dim,
                "mode": "fast" if fast else "exact",
                "peak_rss_bytes": peak_rss_bytes(),
                "rss_after_imports_bytes": before,
                "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "summary_peak_rss_bytes": result.summary.peak_rss_bytes,
                "seconds": seconds,
                "rows_per_s": rows / seconds,
                "passes": result.summary.passes,
                "pass_seconds": result.summary.pass_seconds,
                "batch_size": result.summary.batch_size,
                "count_ok": bool(np.all(s.count == rows)),
                "data_bytes_if_in_memory": rows * dim * 4,
            }
        )
    )


def run_memory(rows: int, dim: int, fast: bool) -> dict:
    cmd = [
        *module_command("benchmarks.stats.stats_bench"),
        "--memory-child",
        str(rows),
        "--dim",
        str(dim),
    ]
    if fast:
        cmd.append("--fast")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=repo_env())
    if proc.returncode != 0:
        return {
            "rows": rows,
            "dim": dim,
            "mode": "fast" if fast else "exact",
            "error": proc.stderr[-2000:],
        }
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_in_memory(args) -> dict:
    log(f"in_memory: generating {args.rows} x {args.dim}")
    x = make_in_memory(args.rows, args.dim)
    batches = [{"state": x[i : i + IN_MEMORY_BATCH]} for i in range(0, len(x), IN_MEMORY_BATCH)]
    w: dict = {
        "rows": args.rows,
        "dim": args.dim,
        "batch_rows": IN_MEMORY_BATCH,
        "column_kinds": column_kinds(args.dim),
        "methods": {},
    }
    nb = min(args.baseline_b_rows, args.rows)
    group = timed_group(
        [
            Method("exact", lambda: accelkit_stats(batches, fast=False), args.rows),
            Method("fast", lambda: accelkit_stats(batches, fast=True), args.rows),
            Method("baseline_a", lambda: baseline_a_in_memory(batches), args.rows),
            Method("baseline_b", lambda: baseline_b(x[:nb]), nb, warmup=False),
        ],
        args.repeats,
        "in_memory",
    )
    w["methods"] = {name: m.record for name, m in group.items()}
    exact_res, fast_res, ref = (
        group["exact"].value[0],
        group["fast"].value[0],
        group["baseline_a"].value,
    )
    w["methods"]["baseline_b"]["timed_on_subset"] = nb < args.rows
    w["methods"]["baseline_b"]["note"] = (
        f"timed on the first {nb} of {args.rows} rows (pure-Python per-dimension loop; far too slow for the full set)"
    )
    truth = truth_moments(x)
    acc = {
        "exact": accuracy(exact_res, ref, "state", truth),
        "fast": accuracy(fast_res, ref, "state", truth),
        "baseline_a": accuracy(ref, ref, "state", truth),
    }
    sub_ref = baseline_a_arrays({"state": x[:nb]})
    acc["baseline_b_subset"] = accuracy(baseline_b(x[:nb]), sub_ref, "state", truth_moments(x[:nb]))
    acc["baseline_b_subset"]["reference"] = f"numpy on the same {nb}-row subset"
    if nb < args.rows and not args.no_baseline_b_full:
        log(f"in_memory: baseline_b once on all {args.rows} rows (for its accuracy)")
        t = time.perf_counter()
        full_b = baseline_b(x)
        full_s = time.perf_counter() - t
        acc["baseline_b"] = accuracy(full_b, ref, "state", truth)
        w["methods"]["baseline_b"]["full_run_s"] = full_s
        w["methods"]["baseline_b"]["full_run_rows_per_s"] = args.rows / full_s
    else:
        acc["baseline_b"] = acc["baseline_b_subset"]
    w["accuracy"] = acc
    w["accuracy_definition"] = (
        "quantiles: max over dimensions and levels of |q - numpy.quantile(all float32 rows, q, axis=0)| / std; "
        "mean: max |mean - float64 mean| / std; std: max |std - float64 std| / std (std = float64 population std)"
    )
    return w


def bench_parquet(args) -> dict:
    from accelkit.stats.formats.sources import open_source

    log(
        f"parquet: ensuring a >= {args.parquet_frames}-frame LeRobot v2.1 dataset in {args.data_dir}"
    )
    args.data_dir.mkdir(parents=True, exist_ok=True)
    root, info = ensure_parquet_dataset(args.data_dir, args.parquet_frames, args.frames_per_episode)
    frames = info["frames"]
    p: dict = {
        "dataset": info,
        "keys": {"state": "observation.state", "actions": "action"},
        "dim_per_key": 14,
        "methods": {},
    }
    group = timed_group(
        [
            Method("exact", lambda: accelkit_stats(open_source(root), fast=False), frames),
            Method("fast", lambda: accelkit_stats(open_source(root), fast=True), frames),
            Method("baseline_a", lambda: baseline_a_parquet(root), frames),
            Method("read_only", lambda: read_only(open_source(root)), frames),
            Method("pyarrow_read", lambda: pyarrow_read(root), frames),
        ],
        args.repeats,
        "parquet",
    )
    p["methods"] = {name: m.record for name, m in group.items()}
    p["methods"]["pyarrow_read"]["note"] = (
        "baseline: pq.read_table of the two columns of every file, to numpy, nothing computed"
    )
    p["methods"]["read_only"]["note"] = (
        "diagnostic, not a competitor: one pass of accelkit's parquet reader (open_source(...).chunks()) with no statistics"
    )
    pe, pref = group["exact"].value[0], group["baseline_a"].value
    p["accuracy"] = {
        "exact_max_err_over_std": {k: accuracy(pe, pref, k)["max_err_over_std"] for k in pref}
    }
    p["note"] = (
        "files are read from the page cache after the warm-up run (the dataset is far smaller than RAM)"
    )
    return p


def bench_many_files(args) -> dict:
    from accelkit.stats.formats.sources import open_source

    log(
        f"many_files: ensuring a >= {args.many_frames}-frame LeRobot v2.1 dataset in {args.data_dir}"
    )
    root, info = ensure_parquet_dataset(args.data_dir, args.many_frames, args.frames_per_episode)
    frames = info["frames"]
    group = timed_group(
        [
            Method("exact", lambda: accelkit_stats(open_source(root), fast=False), frames),
            Method("baseline_a", lambda: baseline_a_parquet(root), frames),
            Method("pyarrow_read", lambda: pyarrow_read(root), frames),
        ],
        max(1, args.repeats - 1),
        "many_files",
    )
    out = {"dataset": info, "methods": {name: m.record for name, m in group.items()}}
    pe, pref = group["exact"].value[0], group["baseline_a"].value
    out["accuracy"] = {
        "exact_max_err_over_std": {k: accuracy(pe, pref, k)["max_err_over_std"] for k in pref}
    }
    return out


def bench_startup(args) -> dict:
    """The whole `accelkit stats` process on the v2.1 sample dataset vs bare numpy + pyarrow imports."""
    import subprocess
    import tempfile

    from accelkit.stats.formats.synthetic import write_sample_dataset

    sample = args.data_dir / "startup_sample_v21"
    if not (sample / "meta" / "info.json").is_file():
        write_sample_dataset(sample)
    out = Path(tempfile.mkdtemp()) / "norm_stats.json"
    commands = {
        "accelkit_stats": [
            sys.executable, "-m", "accelkit", "stats", str(sample), "--no-progress", "-o", str(out),
        ],
        "import_numpy_pyarrow": [sys.executable, "-c", "import numpy, pyarrow"],
    }  # fmt: skip
    from accelkit.runtime.timing import interleaved

    timed = interleaved(  # warm-up: page cache, compiled-program cache
        {
            name: (lambda command=command: subprocess.run(command, check=True, capture_output=True))
            for name, command in commands.items()
        },
        args.startup_repeats,
        before=lambda name, r: log(f"startup: {name} ({r + 1}/{args.startup_repeats})"),
    )
    times, medians = timed.wall, timed.medians()
    return {
        "dataset": str(sample),
        "times_s": times,
        "median_s": medians,
        "overhead_s": medians["accelkit_stats"] - medians["import_numpy_pyarrow"],
        "overhead_per_round_s": [
            a - b
            for a, b in zip(times["accelkit_stats"], times["import_numpy_pyarrow"], strict=True)
        ],
    }


def bench_memory(args) -> dict:
    sizes = sorted(int(s) for s in args.memory_rows.split(","))
    mem: dict = {"dim": args.dim, "batch_rows": GEN_BATCH, "runs": []}
    for repeat in range(args.memory_repeats):
        for fast in (False, True) if args.memory_fast else (False,):
            for n in sizes:
                log(
                    f"memory: {'fast' if fast else 'exact'} at {n} x {args.dim} in a subprocess ({repeat + 1}/{args.memory_repeats})"
                )
                mem["runs"].append({**run_memory(n, args.dim, fast), "repeat": repeat})
    peaks: dict = {}
    for r in mem["runs"]:
        if "error" not in r:
            peaks.setdefault(r["mode"], {}).setdefault(str(r["rows"]), []).append(
                r["peak_rss_bytes"]
            )
    mem["peak_rss_max_bytes"] = {
        mode: {n: max(v) for n, v in by.items()} for mode, by in peaks.items()
    }
    mem["note"] = (
        "peak RSS is the whole process (Python + JAX runtime + accelkit) in a fresh subprocess, read from "
        "VmHWM (/proc/self/status); ru_maxrss_bytes and summary_peak_rss_bytes (accelkit's own, from "
        "ru_maxrss) are recorded too but include the parent's high-water mark inherited across fork + exec"
    )
    return mem


def environment() -> dict:
    """The machine record (`benchmarks.common.machine`) plus the JAX devices."""
    import jax

    return machine(
        ("numpy", "jax", "jaxlib", "pyarrow"), jax_devices=[str(d) for d in jax.devices()]
    )
