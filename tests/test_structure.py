"""The shape of the library (issue 18): no import cycles in rl4llm/ (function-level imports included), nothing of
configs/ imported by rl4llm/train/, train/ files and functions of a readable size, no TrainState / LearnerBatch
field named after a paper."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rl4llm"
MAX_FILE_LINES = 350
MAX_FUNCTION_LINES = 60


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The rl4llm modules `path` imports anywhere (a `from package import name` of a submodule counts as it)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in modules else node.module)
    return {m for m in out if m in modules}


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _imports(path, set(files)) - {name} for name, path in files.items()}


def test_no_import_cycles_in_rl4llm():
    graph = _graph()
    # Packages' __init__ re-export their modules; an edge into a package is an edge into what it re-exports.
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, f"import cycles: {cycles}"


def _imported(path: pathlib.Path) -> list[str]:
    """Every module name `path` imports (anywhere in it)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or "")
    return names


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_train_imports_nothing_from_configs_and_configs_nothing_from_train():
    for path in (PACKAGE / "train").rglob("*.py"):
        assert not any(_under(n, "configs") for n in _imported(path)), path
    for path in [*(PACKAGE / "config").rglob("*.py"), *(ROOT / "configs").glob("*.py")]:
        assert not any(_under(n, "rl4llm.train") for n in _imported(path)), path


def test_train_files_and_functions_are_of_a_readable_size():
    too_long = []
    for path in sorted((PACKAGE / "train").rglob("*.py")):
        lines = path.read_text().splitlines()
        if len(lines) > MAX_FILE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {len(lines)} lines")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert not too_long, too_long


def test_learner_state_and_batch_fields_name_no_paper():
    from rl4llm.rl import registry
    from rl4llm.train import learner

    papers = set(registry.ADVANTAGES) | set(registry.POLICY_LOSSES) | {"prm", "prime", "epo", "ppo", "dapo", "critic"}
    for cls in (learner.TrainState, learner.LearnerBatch):
        named = sorted(f for f in cls.__dataclass_fields__ if f in papers or f.split("_")[0] in papers)
        assert not named, f"{cls.__name__} fields named after a method: {named}"
