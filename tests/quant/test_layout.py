"""The house rules for `accelkit.quant` (issue 39): imports point down (no circle among its
modules), the command line is thin (≤ 400 lines, calls the library API only) and no file holds
several rooms (≤ 700 lines)."""

import ast
from pathlib import Path

import accelkit.quant

PACKAGE = Path(accelkit.quant.__file__).parent


def quant_imports(path: Path) -> set[str]:
    """The accelkit.quant modules a file imports (at any depth: lazy imports count too), by their
    name below the package (`evaluation.report`; a name imported from a package counts as its
    module when there is one, `from accelkit.quant.method import kernels` as `method.kernels`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "accelkit.quant" or node.module.startswith("accelkit.quant."):
                base = node.module.removeprefix("accelkit.quant").lstrip(".")
                for alias in node.names:
                    name = f"{base}.{alias.name}" if base else alias.name
                    found.add(name if name in modules() else base or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("accelkit.quant."):
                    found.add(alias.name.removeprefix("accelkit.quant."))
    return found


def modules() -> dict[str, Path]:
    """Every module of the package by its name below it (`api`, `method.layers`)."""
    return {
        ".".join(p.relative_to(PACKAGE).with_suffix("").parts): p
        for p in PACKAGE.rglob("*.py")
        if p.stem != "__init__"
    }


def graph() -> dict[str, set[str]]:
    return {name: quant_imports(p) & set(modules()) for name, p in modules().items()}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the list of modules around it, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle():
    assert cycle(graph()) is None, cycle(graph())


def test_the_circle_finder_finds_one():  # the check above can fail
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_the_command_line_only_calls_the_library():
    cli = PACKAGE / "cli.py"
    assert len(cli.read_text(encoding="utf-8").splitlines()) <= 400
    assert quant_imports(cli) <= {"api", "evaluation.report"}  # the API, report's column names


def test_no_file_over_700_lines():
    long = {
        p.name: n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 700
    }
    assert not long


def test_every_result_object_names_its_json_document():
    """docs/architecture.md: result objects give the `--json` result as `.document()` (EvalResult
    and ApplyResult once called it `to_dict()`, while stats and bench said `document()`)."""
    results = {}
    for name, path in modules().items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Result"):
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                results[f"{name}.{node.name}"] = methods
    assert {"api.EvalResult", "api.ApplyResult", "evaluation.target.TargetResult"} <= set(results)
    wrong = {name for name, methods in results.items() if "document" not in methods}
    wrong |= {name for name, methods in results.items() if methods & {"to_dict", "as_dict"}}
    assert not wrong, sorted(wrong)
