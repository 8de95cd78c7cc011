"""The host kernel's machine code kept between processes, and linked without numba.

numba compiles the exact passes' loop (`kernel/host.py`) once per machine and caches it, but every
process that loads it back pays ~0.3 CPU-s of Python first — numba's import, its typing and
target contexts, its runtime — under the GIL, while the reader threads need it, and ~100 MiB of
memory. The loop's entry is a numba `cfunc` whose native function takes only pointers and
integers. After numba has compiled it, its object code (numba's own bytes,
`serialize_using_object_code`) is written to the user's cache; later processes link that object
with llvmlite's MCJIT (numba's own JIT linker: ~0.04 s and no numba import) and call the same
machine code through ctypes. The result is the same bits by construction: the same instructions.

Safety. The file is named by a key of everything that shapes the code — the kernel's source
files, numba's and llvmlite's versions, the CPU's name and features (the code uses the host's
instructions), the interpreter — and checked on load: its SHA-256, then a probe run on fixed
data whose outputs must have the digest numba's own build gave when it was stored. Anything
else (no cache, an unwritable folder, a check that fails, llvmlite refusing the object) falls
back to numba, which is always correct, only slower to start. The object refers to a few of
numba's runtime functions (`numba_*`, `NRT_*`) and the interpreter's C API in the cfunc
wrapper's error path only (the native function called here never reaches them: checked on the
module's call graph before it is kept). The C API names are linked to the interpreter's own;
numba's, where numba has not given them already, to a function that stops the process with a
message, never silently — and numba replaces those with its own when it starts, so its later
compilations in the same process link to its real runtime.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import logging
import os
import re
import sys
from pathlib import Path

from accelkit.runtime.files import atomic_open

log = logging.getLogger(__name__)

FOLDER = "stats-kernel"
# the symbols a kept object may refer to: numba's runtime and the interpreter's C API, from the
# cfunc wrapper's error path only (linked to a stop), and what the C library gives every process
TRAPPED = ("numba_", "NRT_", "Py", "_Py")
PROCESS = ("llvm.", "memset", "memcpy", "memmove")
# reachable from the native function, but only through numba's reference counting of arrays
# that have an owner (`NRT_decref` of a live count reaching 0): arrays made from addresses have
# none, so it is never called
DORMANT = ("NRT_MemInfo_call_dtor",)
_engines: list = []  # linked objects stay alive with the process
_trap = None


def folder() -> Path:
    """`$ACCELKIT_CACHE_DIR/stats-kernel`, else the user cache's (as the JAX cache)."""
    import platformdirs

    base = os.environ.get("ACCELKIT_CACHE_DIR") or platformdirs.user_cache_dir("accelkit")
    return Path(base) / FOLDER


def key(variant: str, sources: list[Path]) -> str:
    """What shapes the machine code of `variant`: its sources, numba's and llvmlite's versions,
    the host CPU and the interpreter. Reading it costs no numba import."""
    import llvmlite
    import llvmlite.binding as llvm

    digest = hashlib.sha256(variant.encode())
    for path in sources:
        digest.update(path.read_bytes())
    numba_spec = importlib.util.find_spec("numba")
    if numba_spec is None or numba_spec.origin is None:
        raise ImportError("numba is not installed")
    digest.update((Path(numba_spec.origin).parent / "_version.py").read_bytes())
    digest.update(llvmlite.__version__.encode())
    digest.update(llvm.get_host_cpu_name().encode())
    digest.update(llvm.get_host_cpu_features().flatten().encode())
    digest.update(sys.implementation.cache_tag.encode())
    return f"{variant}-{digest.hexdigest()[:32]}"


def writable() -> bool:
    """Whether a kept object can be written (the folder exists or can be made, and is writable)."""
    where = folder()
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(where, os.W_OK)


def store(name: str, library, symbol: str, probe: str) -> bool:
    """Write numba's compiled `library` (its native function `symbol`) as `name`, with the digest
    of its probe run. False where it cannot be kept: numba loaded it from its own cache (no
    object code, no IR to check), the object refers to a symbol this module would not know how
    to link, or the folder refuses the files."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numba warns that a cached library has no IR
            ir = library.get_llvm_str()
            code = library.serialize_using_object_code()[2][0]
    except Exception:
        return False
    externals = sorted(
        set(re.findall(r'^declare [^@]*@"?([\w.$]+)"?\(', ir, re.M))
        | set(re.findall(r'^@"?([\w.$]+)"? = external ', ir, re.M))
    )
    unknown = [n for n in externals if not n.startswith(TRAPPED + PROCESS)]
    reached = [n for n in _reached(ir, symbol) & set(externals) if n.startswith(TRAPPED)]
    defined = re.search(rf'^define [^@]*@"?{re.escape(symbol)}"?\(', ir, re.M)
    if unknown or set(reached) - set(DORMANT) or not defined:
        log.info("the statistics loop is not kept: it calls %s", ", ".join(unknown + reached))
        return False
    meta = {
        "symbol": symbol,
        "sha256": hashlib.sha256(code).hexdigest(),
        "probe": probe,
        "trapped": [n for n in externals if n.startswith(TRAPPED)],
    }
    where = folder()
    try:
        with atomic_open(where / f"{name}.o", "wb", output=False) as handle:
            handle.write(code)
        with atomic_open(where / f"{name}.json", "w", output=False) as handle:
            json.dump(meta, handle)
    except Exception as exc:  # a cache: never a reason to fail
        log.info("the statistics loop is not kept in %s: %s", where, exc)
        return False
    return True


def _reached(ir: str, entry: str) -> set[str]:
    """The symbols the function `entry` of the LLVM module `ir` may reach, through the bodies of
    the functions it calls (a name mentioned in a body counts as a call)."""
    bodies: dict[str, str] = {}
    for match in re.finditer(r'^define [^@]*@"?([\w.$]+)"?\(.*?^}$', ir, re.M | re.S):
        bodies[match.group(1)] = match.group(0)
    seen, todo = set(), [entry]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        body = bodies.get(name, "")
        todo += re.findall(r'@"?([\w.$]+)"?', body[body.index("(") :] if body else "")
    return seen


def load(name: str, prototype) -> tuple[object, str] | None:
    """The native function stored as `name` as a ctypes function of `prototype`, with the probe
    digest it must reproduce; None where there is none or it does not check out."""
    where = folder()
    try:
        meta = json.loads((where / f"{name}.json").read_text())
        code = (where / f"{name}.o").read_bytes()
    except (OSError, ValueError):
        return None
    if hashlib.sha256(code).hexdigest() != meta.get("sha256"):
        log.info("the kept statistics loop %s is damaged; compiling it again", name)
        return None
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        machine = llvm.Target.from_default_triple().create_target_machine()
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
        for symbol in meta["trapped"]:
            _link(llvm, symbol)
        engine.add_object_file(llvm.ObjectFileRef.from_data(code))
        engine.finalize_object()
        address = engine.get_function_address(meta["symbol"])
    except Exception as exc:
        log.info("the kept statistics loop %s does not link (%s); compiling it again", name, exc)
        return None
    if not address:
        return None
    _engines.append(engine)
    return prototype(address), meta["probe"]


def _link(llvm, symbol: str) -> None:
    """Give `symbol` an address in LLVM's process-wide table, changing nothing numba relies on:
    the interpreter's own (what any JIT of this process finds for it), a numba runtime symbol
    numba has already given, or else the stop (numba gives its own when it starts, replacing it
    for everything numba links later; what is linked here keeps the stop)."""
    if symbol.startswith(("Py", "_Py")):
        llvm.add_symbol(
            symbol, ctypes.cast(getattr(ctypes.pythonapi, symbol), ctypes.c_void_p).value
        )
    elif not llvm.address_of_symbol(symbol):
        llvm.add_symbol(symbol, _trap_address())


def _trap_address() -> int:
    """A function that stops the process, for the symbols only numba's error path refers to."""
    global _trap
    if _trap is None:

        def trap():
            sys.stderr.write("accelkit: the statistics loop reached numba's runtime; stopping\n")
            sys.stderr.flush()
            os.abort()

        _trap = ctypes.CFUNCTYPE(None)(trap)
    address = ctypes.cast(_trap, ctypes.c_void_p).value
    assert address is not None  # a live callback's
    return address
