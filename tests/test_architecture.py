"""The house rules of docs/architecture.md, checked on the source tree (read as text, nothing is
imported): arrows point down and never close a circle, a capability never imports another, the
command lines stay thin and no file grows into several rooms.

The code around src/ keeps the same rules and three of its own (the end of this file):
benchmarks/ and tests/ close no import circle; no module imports a test module (`test_*`) or a
`conftest` (what tests share lives in tests/support/, or in `accelkit.*.testing` when public;
fixtures in conftest.py); and tests never import benchmarks (a test that checks a benchmark runs
it as a user does, `python -m benchmarks.ROOM.NAME`, or the shared piece moves to tests/support/
or src/). Benchmarks run as modules and never edit sys.path.

Every import counts, also one inside a function (a lazy import still makes the two modules depend
on each other), and so does a name a package exports lazily (`from accelkit.stats import
compute_stats` depends on the module that defines it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
CAPABILITIES = ("stats", "images", "quant", "bench")
MAX_LINES = 700  # any source file: past this it holds more than one concern
MAX_CLI_LINES = 400  # a command line only parses, calls one library function and renders


def module_files(src: Path = SRC) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (packages by __init__.py)."""
    modules = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def lazy_exports(path: Path, package: str) -> dict[str, str]:
    """The names a package's __init__ exports lazily: name -> module, from its `if TYPE_CHECKING:`
    imports (runtime/exports.py)."""
    exports = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for item in node.body:
                if isinstance(item, ast.ImportFrom) and item.module:
                    for alias in item.names:
                        exports[alias.asname or alias.name] = item.module
    return exports


def import_graph(src: Path = SRC, modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in its body); `modules` (default: every
    module under `src`) are the nodes."""
    modules = module_files(src) if modules is None else modules
    exports = {
        name: lazy_exports(path, name) for name, path in modules.items() if path.stem == "__init__"
    }

    def resolve(target: str, name: str | None) -> str | None:
        if name is not None and f"{target}.{name}" in modules:
            return f"{target}.{name}"
        if name is not None and name in exports.get(target, {}):
            return exports[target][name]
        return target if target in modules else None

    graph = {}
    for module, path in modules.items():
        package = module if path.stem == "__init__" else module.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    found = resolve(target, alias.name)
                    if found:
                        edges.add(found)
        edges.discard(module)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def capability(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in CAPABILITIES else None


def test_the_cycle_finder_finds_cycles():
    """The checks below are only as good as this: a circle through three modules and a pair."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["e", "f"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from pkg.sub.deep import thing as thing\n    from pkg.top import other as other\n"
    )
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "deep.py").write_text("def f():\n    from .. import top\n")
    (package / "top.py").write_text("from pkg import thing\n")
    (package / "user.py").write_text("import pkg.sub\nfrom pkg import other\n")
    graph = import_graph(tmp_path)
    assert graph["pkg.top"] == {"pkg.sub.deep"}
    assert graph["pkg.user"] == {"pkg.sub", "pkg.top"}
    assert graph["pkg.sub.deep"] == {"pkg.top"}
    assert cycles(graph) == [["pkg.sub.deep", "pkg.top"]]


def test_no_import_circles():
    found = cycles(import_graph())
    assert not found, "import circles (move the shared piece below both): " + "; ".join(
        " <-> ".join(c) for c in found
    )


def test_a_capability_never_imports_another_and_runtime_imports_none():
    wrong = []
    for module, edges in import_graph().items():
        own = capability(module)
        for target in edges:
            other = capability(target)
            below = module.startswith("accelkit.runtime") or (own and other != own)
            if other and below:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports across capabilities (shared needs go to runtime/): " + ", ".join(
        sorted(wrong)
    )


def test_arrows_point_down_to_the_command_lines():
    """Only the root CLI imports a capability's command line; nothing below a face imports it."""
    wrong = sorted(
        f"{module} -> {target}"
        for module, edges in import_graph().items()
        for target in edges
        if target.endswith(".cli")
        and capability(target)
        and module != "accelkit.cli"
        and not module.startswith(target.rpartition(".")[0] + ".cli")
    )
    assert not wrong, "a library module imports a command line: " + ", ".join(wrong)


@pytest.mark.parametrize("folder", ["src", "benchmarks"])
def test_no_file_holds_several_rooms(folder):
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines (split by concern): {long}"


def is_face(path: Path) -> bool:
    """A face parses, calls one library function and renders: every file under a `cli/` folder,
    and every module named `cli`, `*_cli` or `cli_*` (`check_cli.py`, `cli_collection.py`)."""
    stem = path.stem
    return (
        "cli" in path.parent.parts
        or stem == "cli"
        or stem.endswith("_cli")
        or stem.startswith("cli_")
    )


def long_faces(src: Path = SRC) -> dict[str, int]:
    """Faces over MAX_CLI_LINES lines, by path relative to `src`."""
    return {
        str(path.relative_to(src)): n
        for path in sorted(src.rglob("*.py"))
        if is_face(path.relative_to(src))
        and (n := len(path.read_text().splitlines())) > MAX_CLI_LINES
    }


def test_the_face_rule_sees_every_face(tmp_path):
    """The rule once looked only at files named cli.py: a 500-line `check_cli.py`,
    `cli_collection.py` or `cli/check.py` escaped it."""
    long = "x = 1\n" * (MAX_CLI_LINES + 1)
    for name in ("pkg/check_cli.py", "pkg/cli_collection.py", "pkg/cli/check.py", "pkg/cli.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(long)
    (tmp_path / "pkg" / "client.py").write_text(long)  # a library module, not a face
    assert sorted(long_faces(tmp_path)) == [
        "pkg/check_cli.py", "pkg/cli.py", "pkg/cli/check.py", "pkg/cli_collection.py"
    ]  # fmt: skip


def test_command_lines_stay_thin():
    long = long_faces()
    assert not long, f"faces over {MAX_CLI_LINES} lines (move the work into the library): {long}"


# ---- rooms inside each capability (docs/architecture.md): floors, lowest first. A module's room is
# its first name below the capability (`method` for accelkit.quant.method.layers). A module imports
# its own room and rooms on lower floors only: rooms on one floor are siblings and never import each
# other (check and diff; local and Ray runners' callers).
# The package's __init__ (its lazy exports) stands above them all. A new room is given its floor here.
FLOORS = {
    "accelkit.stats": (
        ("types",),  # the stream vocabulary
        ("core",),  # pure maths: no files, no devices
        ("upstream",),  # LeRobot's and openpi's arithmetic reproduced
        ("kernel",),  # one data pass: state, device and host implementations
        ("engine", "formats"),  # which passes on which runner | everything on disk
        ("settings",),  # one run's settings
        ("mixture",),  # several datasets as one
        ("computation",),  # accelkit.stats.compute
        ("checking", "diffing"),  # accelkit.stats.check / fix | accelkit.stats.diff
        ("cli",),  # the faces
    ),
    "accelkit.images": (
        ("settings", "testing"),  # config, schema, filters | sample photos
        ("embedding",),  # images in, vectors out: decode, preprocess, models, the Ray pipeline
        ("store", "importing"),  # Milvus, thumbnails, migrate | a Hugging Face CLIP/SigLIP
        # folder -> the ONNX pair, tokenizer.json, YAML
        ("index",),  # ImageIndex: local, remote, the Ray sink, opener; ranking (cut, steer)
        ("operations", "compat", "service"),  # the API's inputs, runners (here or on Ray) and
        # results | EmbeddingTrident's facade | HTTP
        ("api",),  # the library API
        ("cli",),  # the faces
    ),
    "accelkit.quant": (
        ("config", "models"),  # the subjects of both method and evaluation: what, and on what
        ("method",),  # quantizers, transforms, calibrate, convert, layers, kernels, storage
        ("evaluation",),  # sweep, fidelity, speed, target, recommend, report, corpus, tokenize
        ("api",),  # evaluate, apply
        ("cli",),  # the face
    ),
    "accelkit.bench": (
        ("harness",),  # timing and checks
        ("schema", "processes"),  # the document | child processes
        ("experiments",),  # the workloads; they never know how they are shown or run as a suite
        ("render",),  # tables, markdown, figures
        ("suite",),  # `bench all` and its report
        ("api",),
        ("cli",),
    ),
}
# what a core must not import: file formats, our file and storage modules, drawing
CORE_FORBIDDEN = (
    "pyarrow",
    "av",
    "cv2",
    "PIL",
    "matplotlib",
    "accelkit.runtime.storage",
    "accelkit.runtime.files",
    "accelkit.stats.formats",
)


def room_of(module: str, package: str) -> str | None:
    """`accelkit.quant.method.layers` -> "method" in accelkit.quant; None outside the package or
    for the package itself."""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1 :].split(".")[0]


def wrong_arrows(graph: dict[str, set[str]], package: str, floors) -> list[str]:
    """The imports inside `package` between two rooms that point up or sideways, or that start or
    end in a room no floor names."""
    level = {room: i for i, rooms in enumerate(floors) for room in rooms}
    wrong = []
    for module, edges in graph.items():
        source = room_of(module, package)
        if source is None:
            continue
        for target in edges:
            room = room_of(target, package)
            if room is None or room == source:
                continue
            if source not in level or room not in level or level[room] >= level[source]:
                wrong.append(f"{module} -> {target}")
    return sorted(wrong)


def test_the_floor_rule_sees_arrows_up_and_sideways():
    graph = {
        "p.method.a": {"p.config", "p.method.b"},
        "p.method.b": {"p.evaluation.c"},
        "p.evaluation.c": {"p.method.a", "p.report"},
        "p.stray": set(),
    }
    floors = (("config",), ("method",), ("evaluation", "report"))
    assert wrong_arrows(graph, "p", floors) == [
        "p.evaluation.c -> p.report",
        "p.method.b -> p.evaluation.c",
    ]
    assert wrong_arrows({"p.stray": {"p.config"}}, "p", floors) == ["p.stray -> p.config"]


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_every_module_is_in_a_room_with_a_floor(package):
    level = {room for rooms in FLOORS[package] for room in rooms}
    rooms = {room_of(module, package) for module in module_files()} - {None}
    assert rooms <= level, f"rooms of {package} without a floor: {sorted(rooms - level)}"


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_rooms_import_only_rooms_below(package):
    """In stats, check and diff never import each other and the cores no engine; in images,
    embedding/ imports no index/, store/ or service/; in quant, method/ never imports evaluation/;
    in bench, no experiment imports the renderers, the suite, the API or the face."""
    wrong = wrong_arrows(import_graph(), package, FLOORS[package])
    assert not wrong, f"imports up or sideways in {package}: " + ", ".join(wrong)


def imported_names(path: Path) -> set[str]:
    """Every module a file imports, third-party ones included, anywhere in its body."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update(f"{node.module}.{a.name}" for a in node.names)
            names.add(node.module)
    return names


def test_cores_touch_no_files():
    wrong = sorted(
        f"{module} -> {name}"
        for module, path in module_files().items()
        if module.startswith("accelkit.stats.core.")
        for name in imported_names(path)
        if any(name == f or name.startswith(f + ".") for f in CORE_FORBIDDEN)
    )
    assert not wrong, "stats/core/ reads or writes files: " + ", ".join(wrong)


@pytest.mark.parametrize("capability", ["stats", "images"])
def test_faces_are_the_files_under_cli(capability):
    """Every module of the capability that speaks typer is a face under its cli/ folder, every
    file there is held to the face's line cap (`is_face`), and only faces import faces."""
    root = SRC / "accelkit" / capability
    speaking = {
        str(path.relative_to(root))
        for path in sorted(root.rglob("*.py"))
        if "typer" in path.read_text()
    }
    assert speaking and all(path.startswith("cli/") for path in speaking), speaking
    assert all(is_face(path.relative_to(SRC)) for path in (root / "cli").rglob("*.py"))
    faces = f"accelkit.{capability}.cli"
    wrong = sorted(
        f"{module} -> {target}"
        for module, edges in import_graph().items()
        for target in edges
        if target.startswith(faces) and module != "accelkit.cli" and not module.startswith(faces)
    )
    assert not wrong, f"a library module imports a {capability} face: " + ", ".join(wrong)


# -- the code around src/: benchmarks/ and tests/ -------------------------------------------------

AROUND = ("benchmarks", "tests")


def around_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of benchmarks/ and tests/ by its dotted name from the repository root."""
    return {
        name: path
        for name, path in module_files(root).items()
        if name.split(".")[0] in AROUND and "fixtures" not in name.split(".")
    }


def is_test_module(name: str) -> bool:
    last = name.rpartition(".")[2]
    return last.startswith("test_") or last == "conftest"


def imports_of_test_modules(modules: dict[str, Path]) -> list[str]:
    """`module -> test module` for every import of a test module or a conftest."""
    return sorted(
        f"{module} -> {name}"
        for module, path in modules.items()
        for name in imported_names(path)
        if is_test_module(name) and not (module.endswith("conftest") and name == "pytest")
    )


def sys_path_edits(path: Path) -> int:
    """Calls that change sys.path (`sys.path.insert/append/extend(...)`, `sys.path[...] = ...`)."""
    edits = 0
    for node in ast.walk(ast.parse(path.read_text())):
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value if node.func.attr in {"insert", "append", "extend"} else None
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            target = next((t.value for t in targets if isinstance(t, ast.Subscript)), None)
        if isinstance(target, ast.Attribute) and target.attr == "path":
            edits += getattr(target.value, "id", None) == "sys"
    return edits


def test_the_rules_around_src_see_what_they_forbid(tmp_path):
    """The checks below are only as good as this: a circle, a test module imported three ways, a
    conftest imported, a benchmark imported by a test and sys.path edited twice."""
    for name, text in {
        "benchmarks/__init__.py": "",
        "benchmarks/a.py": "import sys\nsys.path.insert(0, 'x')\nfrom benchmarks import b\n",
        "benchmarks/b.py": "def f():\n    from benchmarks.a import g\n",
        "tests/__init__.py": "",
        "tests/test_x.py": "from tests.test_y import helper\nimport benchmarks.a\n",
        "tests/test_y.py": "from tests import conftest\nimport sys\nsys.path[:0] = ['x']\n",
        "tests/support.py": "def f():\n    from tests.test_x import thing\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    modules = around_modules(tmp_path)
    assert cycles(import_graph(tmp_path, modules)) == [["benchmarks.a", "benchmarks.b"]]
    assert imports_of_test_modules(modules) == [
        "tests.support -> tests.test_x",
        "tests.test_x -> tests.test_y",
        "tests.test_y -> tests.conftest",
    ]
    assert sum(sys_path_edits(p) for p in modules.values()) == 2
    assert is_test_module("tests.images.conftest") and not is_test_module("tests.support.tests")


def test_no_import_circles_around_src():
    modules = around_modules()
    assert {"benchmarks.common", "tests.support.crash.harness"} <= set(modules)
    found = cycles(import_graph(ROOT, modules))
    assert not found, "import circles in benchmarks/ or tests/: " + "; ".join(
        " <-> ".join(c) for c in found
    )


def test_nothing_imports_a_test_module_or_a_conftest():
    wrong = imports_of_test_modules(around_modules())
    assert not wrong, (
        "shared test pieces go to tests/support/ (fixtures to conftest.py): " + ", ".join(wrong)
    )


def test_tests_never_import_benchmarks():
    wrong = sorted(
        f"{module} -> {name}"
        for module, path in around_modules().items()
        if module.startswith("tests.")
        for name in imported_names(path)
        if name == "benchmarks" or name.startswith("benchmarks.")
    )
    by_path = sorted(  # a benchmark loaded from its file is imported all the same
        module
        for module, path in around_modules().items()
        if module.startswith("tests.") and "spec_from_file_location" in path.read_text()
    )
    wrong += [f"{module} loads a file as a module" for module in by_path if module != __name__]
    assert not wrong, "run the benchmark as `python -m benchmarks...` instead: " + ", ".join(wrong)


def test_benchmarks_are_modules_and_nothing_around_src_edits_sys_path():
    folders = [p for p in (ROOT / "benchmarks").rglob("*") if p.is_dir() and any(p.glob("*.py"))]
    assert all((folder / "__init__.py").is_file() for folder in folders), folders
    around = [p for folder in AROUND for p in (ROOT / folder).rglob("*.py")]  # fixtures' makers too
    edits = {str(path.relative_to(ROOT)): n for path in around if (n := sys_path_edits(path))}
    assert not edits, edits


# -- accelkit.quant's own rules (once tests/quant/test_layout.py) ---------------------------------


def test_the_quant_command_line_only_calls_the_library():
    """Of accelkit.quant, its face imports only the API and the report's column names."""
    edges = {t for t in import_graph()["accelkit.quant.cli"] if t.startswith("accelkit.quant")}
    assert edges <= {"accelkit.quant.api", "accelkit.quant.evaluation.report"}, edges


def test_every_quant_result_object_names_its_json_document():
    """docs/architecture.md: result objects give the `--json` result as `.document()` (EvalResult
    and ApplyResult once called it `to_dict()`, while stats and bench said `document()`)."""
    results = {}
    for name, path in module_files().items():
        if not name.startswith("accelkit.quant."):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Result"):
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                results[f"{name.removeprefix('accelkit.quant.')}.{node.name}"] = methods
    assert {"api.EvalResult", "api.ApplyResult", "evaluation.target.TargetResult"} <= set(results)
    wrong = {name for name, methods in results.items() if "document" not in methods}
    wrong |= {name for name, methods in results.items() if methods & {"to_dict", "as_dict"}}
    assert not wrong, sorted(wrong)
