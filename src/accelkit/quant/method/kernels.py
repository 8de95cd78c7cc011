"""Which integer GEMM a `QuantLinear` runs on this CPU: exact ones only, the fastest measured.

A W·A8 layer computes Σₖ q·b in integers (q: activation codes, b: int8 weights) and scales the
sums once (`quantizers.integer_linear`). Three kernels can do it on a CPU:

- `onednn`: `torch._int_mm`, oneDNN's s8·s8→s32 matmul (activation codes shifted to int8); an
  aten op, so torch.compile traces it.
- `fbgemm`: fbgemm's u8·s8 GEMM on weights prepacked once per layer
  (`quantized::linear_with_input_q_dq_qweight_dq_output_fp32`, the kernel of PyTorch's own
  dynamic quantization), behind the custom op `accelkit_quant::fbgemm_mm` so a compiled graph
  calls it as one opaque node. Its quantized-tensor API is deprecated (pytorch/pytorch#184982) but
  ships in torch 2.13; where it is missing or fails, the kernel is simply not eligible.
- `float`: no integer GEMM — fake-quantized activations times the dequantized weight.

**Exact or not at all.** With VNNI/AMX dot products both integer kernels sum exactly. Without
them (AVX2, AVX-512 without VNNI) both multiply adjacent u8·s8 pairs into a *saturating* int16
(`vpmaddubsw`), so a pair's sum above 32767 comes back wrong (reproduced with
`ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2`). That cannot happen
when every weight has |b| ≤ 64 (255·(64+64) = 32640). `exact(kernel, qmax, wmax)` checks a
kernel on adversarial values of one regime against an int64 product (once per process); a layer
may use a kernel only where the check holds for its activation range and largest |b|.

**Fastest measured.** `KernelTable` times every kernel on each layer shape (in × out) at a
latency-sized and a batch-sized call (`ROWS`), a few calls each, and keeps the fastest exact one.
The numbers are cached per CPU (model name and ISA flags), torch version, thread count and ISA
environment in `quant_kernels.json` under the user cache dir (`$ACCELKIT_CACHE_DIR`, else
`$XDG_CACHE_HOME/accelkit`, else `~/.cache/accelkit`), so later processes — a `load_quantized`
after `quantize` — choose the same kernel and give bit-identical outputs. `ACCELKIT_QUANT_KERNEL`
= onednn | fbgemm | float forces one kernel where it is exact.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import platform
import statistics
import time
import warnings
import weakref
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TypeGuard

import torch

from accelkit.errors import ConfigError
from accelkit.runtime.files import write_json_atomic

KERNELS = ("onednn", "fbgemm", "float")
INTEGER_KERNELS = ("onednn", "fbgemm")
ENV_KERNEL = "ACCELKIT_QUANT_KERNEL"
ISA_ENV = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "FBGEMM_ENABLE_INSTRUCTIONS")
ROWS = (32, 512)  # one short text, and a batch: the two calls a kernel is timed at
SAFE_WMAX = 64  # |b| ≤ 64: no u8·s8 pair can saturate int16 (255·128 = 32640)
CACHE_FILE = "quant_kernels.json"
CACHE_VERSION = 1


# ---- the kernels ----


def _pack_fbgemm(weight: torch.Tensor):
    """fbgemm's prepacked form of an int8 weight (m, n), scale 1 per row: the GEMM returns the
    integer sums themselves (as float32)."""
    m = weight.shape[0]
    engine = torch.backends.quantized.engine
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the quantized-tensor API's deprecation notice
        # an aten op torch's stubs leave out of its exports
        qw = torch._make_per_channel_quantized_tensor(  # pyright: ignore[reportPrivateImportUsage]
            weight.contiguous(),
            torch.ones(m, dtype=torch.float64),
            torch.zeros(m, dtype=torch.int64),
            0,
        )
        try:
            torch.backends.quantized.engine = "fbgemm"
            return torch.ops.quantized.linear_prepack(qw, None)
        finally:
            torch.backends.quantized.engine = engine


# prepacked weights per int8 weight tensor (id -> (weakref, packed)); filled by `prepack` in the
# eager refresh, or on a first call, never stale: an entry is used only for the very tensor it
# was packed from, and leaves with it
_PACKED: dict[int, tuple[weakref.ref, object]] = {}


def prepack(weight: torch.Tensor):
    """The fbgemm packing of `weight`, made once per tensor (again after `forget`)."""
    entry = _PACKED.get(id(weight))
    if entry is not None and entry[0]() is weight:
        return entry[1]
    packed = _pack_fbgemm(weight)
    key = id(weight)
    _PACKED[key] = (weakref.ref(weight, lambda _ref, key=key: _PACKED.pop(key, None)), packed)
    return packed


def forget(weight: torch.Tensor) -> None:
    """Drop the packing of `weight` (its values changed)."""
    _PACKED.pop(id(weight), None)


@torch.library.custom_op("accelkit_quant::fbgemm_mm", mutates_args=())
def fbgemm_mm(codes: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Σₖ codes·weightᵀ for codes (t, n): integers 0..255 held in float32, weight (m, n) int8,
    as float32 (t, m), on fbgemm's prepacked u8·s8 kernel."""
    return torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
        codes.contiguous(), 1.0, 0, prepack(weight)
    )


@fbgemm_mm.register_fake
def _fbgemm_mm_fake(codes: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return codes.new_empty(codes.shape[0], weight.shape[0])


def integer_sums(
    kernel: str, codes: torch.Tensor, weight: torch.Tensor, rowsum: torch.Tensor, zero, abits: int
) -> torch.Tensor:
    """Σₖ (q − z)·b per token and output channel, for activation codes q (t, n, float, integers in
    0..2^abits−1) with integer zero points z (t, 1), weight b (m, n) int8 with row sums `rowsum`.
    `onednn` sums in int32 (codes shifted to int8 by 2^(abits−1)); `fbgemm` takes the codes as
    they are and returns float32 sums. Either way exact, up to float rounding of the result."""
    if kernel == "onednn":
        offset = 2 ** (abits - 1)
        a = (codes - offset).to(torch.int8)
        # torch._int_mm: an aten op torch's stubs leave out of its exports
        product = torch._int_mm(a, weight.t())  # pyright: ignore[reportPrivateImportUsage]
        return product - (zero - offset).to(torch.int32) * rowsum
    if kernel == "fbgemm":
        return fbgemm_mm(codes, weight) - zero * rowsum.to(codes.dtype)
    raise ValueError(f"no integer kernel {kernel!r}")


# ---- exactness ----

FLOAT32_EXACT = 2**24  # every integer up to this magnitude is a float32
INT32_MAX = 2**31 - 1


def sum_bound(k: int, qmax: int, wmax: int) -> int:
    """The largest |Σₖ (q − z)·b| a layer of input width `k` can produce with activation codes
    and zero points in 0..qmax and weights in −wmax..wmax: k · qmax · wmax."""
    return k * qmax * wmax


def in_range(kernel: str, k: int, qmax: int, wmax: int) -> bool:
    """Whether `kernel`'s number format holds every sum of such a layer exactly: fbgemm returns
    float32 (integers exact only up to 2^24 — at K = 1024 and full-range 8-bit codes × |b| = 127
    the sums reach 3.3·10^7 and come back rounded); oneDNN sums in int32."""
    if kernel == "fbgemm":
        return sum_bound(k, qmax, wmax) <= FLOAT32_EXACT
    if kernel == "onednn":  # codes shifted to int8 (|a| ≤ 2^(bits−1)), the correction likewise
        return k * (qmax + 1) * wmax <= INT32_MAX
    return True


@functools.cache
def exact(kernel: str, qmax: int, wmax: int, k: int = 256) -> bool:
    """Whether `kernel` sums activation codes in 0..qmax (less per-token zero points in 0..qmax)
    times weights in −wmax..wmax exactly on this CPU for a layer of input width `k`: the sums
    must fit the kernel's number format (`in_range`), and adversarial blocks of width k (runs of
    qmax against ±wmax, random values and zero points) must equal an int64 product, checked
    once per process and width. A kernel that fails or is missing is not exact."""
    if kernel == "float":
        return True
    if not in_range(kernel, k, qmax, wmax):
        return False
    gen = torch.Generator().manual_seed(0)
    m, t = 40, 33
    q = torch.full((t, k), qmax, dtype=torch.int64)
    q[1::2] = torch.randint(0, qmax + 1, (t // 2, k), generator=gen)
    q[2::5, ::3] = 0
    w = torch.full((m, k), wmax, dtype=torch.int64)
    w[::3] = -wmax
    w[1::2] = torch.randint(-wmax, wmax + 1, (m // 2, k), generator=gen)
    zero = torch.randint(0, qmax + 1, (t, 1), generator=gen)
    zero[:3] = 0
    abits = max(2, int(qmax).bit_length())
    b = w.to(torch.int8)
    try:
        got = integer_sums(kernel, q.float(), b, b.sum(1, dtype=torch.int32), zero.float(), abits)
    except (RuntimeError, NotImplementedError, AttributeError):
        return False
    finally:
        forget(b)
    return bool(torch.equal(got.to(torch.int64), (q - zero) @ w.T))


def full_range_exact() -> bool:
    """Whether some integer kernel sums full-range 8-bit codes times any int8 weight exactly here
    (VNNI/AMX; at the probe's width, 256): then W4A8 runs on the int8 GEMM whatever its weights."""
    return any(exact(k, 255, 127) for k in INTEGER_KERNELS)


def eligible(abits: int, wmax: int, only: str | None = None, k: int = 256) -> list[str]:
    """The kernels exact for a layer of input width `k` with `abits`-bit activation codes and
    largest |weight| `wmax` (`float` always is), in `KERNELS` order; `only` keeps just that one
    (and float)."""
    qmax = 2**abits - 1
    out = [n for n in INTEGER_KERNELS if only in (None, n) and exact(n, qmax, wmax, k)]
    return [*out, "float"]


def default_abits(k: int, wbound: int) -> int:
    """Activation bits by default for a layer of input width `k` whose integer weights are
    bounded by `wbound`: 8 where an integer kernel sums full-range 8-bit codes exactly for it
    (always with VNNI/AMX; without, where |b| ≤ 64 — plain 4-bit weights, |b| ≤ 15), else 7
    where 7-bit codes run exactly (fbgemm on AVX2), else 8 (the float path either way)."""
    if eligible(8, wbound, k=k) != ["float"] or eligible(7, wbound, k=k) == ["float"]:
        return 8
    return 7


# ---- choosing by measurement ----


def machine_key() -> dict:
    """What the measured speeds depend on: CPU model and ISA, torch, threads, ISA overrides."""
    model, flags = None, []
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name") and model is None:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
                    flags = [f for f in line.split(":", 1)[1].split() if f in wanted]
                    break
    except OSError:
        pass
    return {
        "cpu": model or platform.processor() or platform.machine(),
        "isa": sorted(flags),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "env": {k: os.environ[k] for k in ISA_ENV if os.environ.get(k)},
    }


def _key_text(key: dict) -> str:
    return json.dumps(key, sort_keys=True)


def cache_path() -> Path:
    import platformdirs

    base = os.environ.get("ACCELKIT_CACHE_DIR") or platformdirs.user_cache_dir("accelkit")
    return Path(base) / CACHE_FILE


def measure_shape(n: int, m: int, rows=ROWS, calls: int = 5) -> dict[str, list[float]]:
    """Median seconds of each kernel (one GEMM of rows × n by n × m, the float one on a float
    weight) at each row count, interleaved; a kernel that fails gets no entry."""
    gen = torch.Generator().manual_seed(0)
    w8 = torch.randint(-SAFE_WMAX, SAFE_WMAX + 1, (m, n), dtype=torch.int8, generator=gen)
    rowsum = w8.sum(1, dtype=torch.int32)
    wf = w8.float()
    out: dict[str, list[float]] = {}
    for r in rows:
        codes = torch.randint(0, 256, (r, n), generator=gen).float()
        zero = torch.full((r, 1), 128.0)
        runs: dict[str, Callable[[], object]] = {
            "onednn": lambda c=codes, z=zero: integer_sums("onednn", c, w8, rowsum, z, 8),
            "fbgemm": lambda c=codes, z=zero: integer_sums("fbgemm", c, w8, rowsum, z, 8),
            "float": lambda c=codes: torch.nn.functional.linear(c, wf),
        }
        times: dict[str, list[float]] = {}
        with torch.no_grad():
            for name, run in list(runs.items()):
                try:
                    run()  # warm-up (and the fbgemm packing)
                except (RuntimeError, NotImplementedError, AttributeError):
                    runs.pop(name)
            for _ in range(calls):
                for name, run in runs.items():
                    start = time.perf_counter()
                    run()
                    times.setdefault(name, []).append(time.perf_counter() - start)
        for name, ts in times.items():
            out.setdefault(name, []).append(statistics.median(ts))
    forget(w8)
    return {k: v for k, v in out.items() if len(v) == len(rows)}


def choose(seconds: dict[str, list[float]], allowed: list[str]) -> str:
    """Of the allowed integer kernels, the one with the least total time relative to the best at
    each row count (so a latency-sized and a batch-sized call weigh alike); `float` — measured
    only as the baseline, a float32 GEMM — when no integer kernel is allowed and measured."""
    timed = {k: v for k, v in seconds.items() if k in allowed and k != "float"}
    if not timed:
        return "float"
    best = [min(v[i] for v in timed.values()) for i in range(len(next(iter(timed.values()))))]
    return min(timed, key=lambda k: (sum(t / b for t, b in zip(timed[k], best, strict=True)), k))


class KernelTable:
    """The measured speeds of this machine, per layer shape, read from and written to the cache
    file; `measure` (injectable, e.g. for tests) times a shape that is not there yet."""

    def __init__(self, path: Path | None = None, measure: Callable = measure_shape):
        self.path = path
        self.measure = measure
        self.key = machine_key()
        self.shapes: dict[str, dict[str, list[float]]] = {}
        self.loaded = False
        self.phases: Callable | None = None  # a run's `speed.Phases`: measuring is its own phase
        self._warned = False  # a malformed cache file is named once

    def _file(self) -> Path:
        return self.path or cache_path()

    def _read(self) -> dict:
        """The cache document, or {} when there is none; a file of any wrong shape (not JSON,
        not ours, lists of uneven length…) counts as empty: named in one warning per table and
        rewritten empty at once."""
        file = self._file()
        try:
            text = file.read_text(encoding="utf-8")
        except OSError:  # none yet, or unreadable: measured anew
            return {}
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if _well_formed(data):
            return data
        if not self._warned:
            self._warned = True

            logging.getLogger(__name__).warning(
                "quant: the kernel cache %s is malformed; read as empty and rewritten (its"
                " kernel speeds are measured again)",
                file,
            )
        self._store({"version": CACHE_VERSION, "machines": {}})
        return {}

    def seconds(self, n: int, m: int) -> dict[str, list[float]]:
        shape = f"{n}x{m}"
        if shape not in self.shapes:
            machine = self._read().get("machines", {}).get(_key_text(self.key), {})
            self.shapes.update(machine.get("shapes", {}))
        if shape not in self.shapes:
            with self.phases("kernel choice") if self.phases else nullcontext():
                self.shapes[shape] = self.measure(n, m)
            self._write(shape)
        return self.shapes[shape]

    def _write(self, shape: str) -> None:
        """Merge this shape into the file (atomically; an unwritable cache only costs a new
        measurement in the next process)."""
        data = self._read() or {"version": CACHE_VERSION, "machines": {}}
        machine = data["machines"].setdefault(
            _key_text(self.key), {"key": self.key, "rows": list(ROWS), "shapes": {}}
        )
        machine["shapes"][shape] = self.shapes[shape]
        self._store(data)

    def _store(self, data: dict) -> None:
        try:
            self._file().parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self._file(), data)
        except OSError:
            pass

    def pick(self, n: int, m: int, abits: int, wmax: int, prefer: str | None = None) -> str:
        """The kernel for a layer (n inputs, m outputs): forced by `ACCELKIT_QUANT_KERNEL` where
        exact; else `prefer` (the kernel a saved layer was validated with) where exact here;
        else the fastest exact one measured for its shape."""
        forced = (os.environ.get(ENV_KERNEL) or "auto").strip().lower()
        if forced not in (*KERNELS, "auto"):
            raise ConfigError(
                f"{ENV_KERNEL}={forced!r} is not a kernel; use auto, {', '.join(KERNELS)}"
            )
        allowed = eligible(abits, wmax, None if forced == "auto" else forced, k=n)
        if forced != "auto":
            return allowed[0]
        if prefer in allowed:
            return prefer
        if allowed == ["float"]:
            return "float"
        return choose(self.seconds(n, m), allowed)

    def report(self) -> dict:
        """The measured seconds per shape and the machine they belong to (for --json)."""
        return {"machine": self.key, "rows": list(ROWS), "cache": str(self._file()),
                "seconds": dict(self.shapes)}  # fmt: skip


def _seconds(value) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _well_formed(data) -> TypeGuard[dict]:
    """A cache document this version reads: machines of shapes of kernel -> equally long lists
    of seconds."""
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return False
    machines = data.get("machines")
    if not isinstance(machines, dict):
        return False
    for machine in machines.values():
        if not isinstance(machine, dict) or not isinstance(machine.get("shapes"), dict):
            return False
        for times in machine["shapes"].values():
            if not isinstance(times, dict):
                return False
            lengths = set()
            for values in times.values():
                if not isinstance(values, list) or not all(_seconds(v) for v in values):
                    return False
                lengths.add(len(values))
            if len(lengths) > 1:
                return False
    return True


_TABLE: list[KernelTable] = []


def table() -> KernelTable:
    """This process's table (one per process: the choice never changes within a run)."""
    if not _TABLE:
        _TABLE.append(KernelTable())
    return _TABLE[0]
