"""Which integer GEMM a `QuantLinear` runs on this CPU: exact ones only, the fastest measured.

A W·A8 layer computes Σₖ q·b in integers (q: activation codes, b: int8 weights) and scales the
sums once (`quantizers.integer_linear`). Three kernels can do it on a CPU:

- `onednn`: `torch._int_mm`, oneDNN's s8·s8→s32 matmul (activation codes shifted to int8); an
  aten op, so torch.compile traces it.
- `fbgemm`: fbgemm's u8·s8 GEMM on weights prepacked once per layer
  (`quantized::linear_with_input_q_dq_qweight_dq_output_fp32`, the kernel of PyTorch's own
  dynamic quantization), behind the custom op `accelkit_quant::fbgemm_mm` so a compiled graph
  calls it as one opaque node. Its quantized-tensor API is deprecated (PyTorch issue 184982) but
  ships in torch 2.13; where it is missing or fails, the kernel is simply not eligible.
- `float`: no integer GEMM — fake-quantized activations times the dequantized weight.

**Exact or not at all.** With VNNI/AMX dot products both integer kernels sum exactly. Without
them (AVX2, AVX-512 without VNNI) both multiply adjacent u8·s8 pairs into a *saturating* int16
(`vpmaddubsw`), so a pair's sum above 32767 comes back wrong (measured with
`ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2`: off by millions). That cannot happen
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
import os
import statistics
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

import torch

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
        qw = torch._make_per_channel_quantized_tensor(
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
        return torch._int_mm(a, weight.t()) - (zero - offset).to(torch.int32) * rowsum
    if kernel == "fbgemm":
        return fbgemm_mm(codes, weight) - zero * rowsum.to(codes.dtype)
    raise ValueError(f"no integer kernel {kernel!r}")


# ---- exactness ----


@functools.cache
def exact(kernel: str, qmax: int, wmax: int) -> bool:
    """Whether `kernel` sums activation codes in 0..qmax times weights in −wmax..wmax exactly on
    this CPU: adversarial blocks (runs of qmax against ±wmax, and random values) against an int64
    product, checked once per process. A kernel that fails or is missing is not exact."""
    if kernel == "float":
        return True
    gen = torch.Generator().manual_seed(0)
    n, m, t = 256, 40, 33
    q = torch.full((t, n), qmax, dtype=torch.int64)
    q[1::2] = torch.randint(0, qmax + 1, (t // 2, n), generator=gen)
    q[2::5, ::3] = 0
    w = torch.full((m, n), wmax, dtype=torch.int64)
    w[::3] = -wmax
    w[1::2] = torch.randint(-wmax, wmax + 1, (m // 2, n), generator=gen)
    zero = torch.zeros(t, 1)
    abits = max(2, int(qmax).bit_length())
    b = w.to(torch.int8)
    try:
        got = integer_sums(kernel, q.float(), b, b.sum(1, dtype=torch.int32), zero, abits)
    except (RuntimeError, NotImplementedError, AttributeError):
        return False
    finally:
        forget(b)
    return bool(torch.equal(got.to(torch.int64), q @ w.T))


def full_range_exact() -> bool:
    """Whether some integer kernel sums full-range 8-bit codes times any int8 weight exactly here
    (VNNI/AMX): then W4A8 runs on the int8 GEMM whatever its weights."""
    return any(exact(k, 255, 127) for k in INTEGER_KERNELS)


def eligible(abits: int, wmax: int, only: str | None = None) -> list[str]:
    """The kernels exact for a layer with `abits`-bit activation codes and largest |weight| `wmax`
    (`float` always is), in `KERNELS` order; `only` keeps just that one (and float)."""
    qmax = 2**abits - 1
    out = [k for k in INTEGER_KERNELS if exact(k, qmax, wmax) and only in (None, k)]
    return [*out, "float"]


# ---- choosing by measurement ----


def machine_key() -> dict:
    """What the measured speeds depend on: CPU model and ISA, torch, threads, ISA overrides."""
    import platform

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

    def _file(self) -> Path:
        return self.path or cache_path()

    def _read(self) -> dict:
        try:
            data = json.loads(self._file().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if data.get("version") == CACHE_VERSION else {}

    def seconds(self, n: int, m: int) -> dict[str, list[float]]:
        shape = f"{n}x{m}"
        if shape not in self.shapes:
            machine = self._read().get("machines", {}).get(_key_text(self.key), {})
            self.shapes.update(machine.get("shapes", {}))
        if shape not in self.shapes:
            from contextlib import nullcontext

            with self.phases("kernel choice") if self.phases else nullcontext():
                self.shapes[shape] = self.measure(n, m)
            self._write(shape)
        return self.shapes[shape]

    def _write(self, shape: str) -> None:
        """Merge this shape into the file (atomically; an unwritable cache only costs a new
        measurement in the next process)."""
        from accelkit.runtime.files import write_json_atomic

        data = self._read() or {"version": CACHE_VERSION, "machines": {}}
        machine = data["machines"].setdefault(
            _key_text(self.key), {"key": self.key, "rows": list(ROWS), "shapes": {}}
        )
        machine["shapes"][shape] = self.shapes[shape]
        try:
            self._file().parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self._file(), data)
        except OSError:
            pass

    def pick(self, n: int, m: int, abits: int, wmax: int) -> str:
        """The kernel for a layer: forced by `ACCELKIT_QUANT_KERNEL` where exact, else the
        fastest exact one measured for its shape."""
        forced = (os.environ.get(ENV_KERNEL) or "auto").strip().lower()
        if forced not in (*KERNELS, "auto"):
            from accelkit.errors import ConfigError

            raise ConfigError(
                f"{ENV_KERNEL}={forced!r} is not a kernel; use auto, {', '.join(KERNELS)}"
            )
        allowed = eligible(abits, wmax, None if forced == "auto" else forced)
        if forced != "auto":
            return allowed[0]
        if allowed == ["float"]:
            return "float"
        return choose(self.seconds(n, m), allowed)

    def report(self) -> dict:
        """The measured seconds per shape and the machine they belong to (for --json)."""
        return {"machine": self.key, "rows": list(ROWS), "cache": str(self._file()),
                "seconds": dict(self.shapes)}  # fmt: skip


_TABLE: list[KernelTable] = []


def table() -> KernelTable:
    """This process's table (one per process: the choice never changes within a run)."""
    if not _TABLE:
        _TABLE.append(KernelTable())
    return _TABLE[0]
