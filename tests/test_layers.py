"""Imports point one way: front doors → api → decoders → components → core.

Every module of pacer_core/, app.py, benchmarks/ and scripts/ is parsed (ast, nothing is imported) and each
import, including the ones inside functions, is resolved to a module name. A module may import modules of
its own layer or a lower one. On top of that:

* a front door does not import another front door (the UI does not import the bench CLI, training does
  not import the UI, ...);
* nothing in the library (pacer_core outside pacer_core.ui) loads gradio or plotly when imported, and no
  script in benchmarks/ or scripts/ loads gradio; "loads" follows the project's module-level imports
  transitively, so importing a UI module that imports gradio counts;
* nothing imports the tests;
* no import circle between the project's modules, counting imports inside functions (a package's
  ``__init__`` importing its own submodules does not count: Python imports a package before its submodules
  anyway, so that edge adds no order of its own).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A name covers itself and its submodules; the facade `pacer_core` (its __init__) only itself.
LAYERS = (
    ("core", ("pacer_core.settings", "pacer_core.events", "pacer_core.sampling", "pacer_core.particles",
              "pacer_core.kvcache", "pacer_core.packed_linear", "pacer_core.quantized_linear", "pacer_core.prompts", "pacer_core.phrases",
              "pacer_core.stopping", "pacer_core.acceptance", "pacer_core.method_table",
              "pacer_core.compute_thread", "pacer_core.heap")),
    ("components", ("pacer_core.embedded", "pacer_core.models", "pacer_core.drafters", "pacer_core.analysis",
                    "pacer_core.preverifier", "pacer_core.llama", "pacer_core.graphed", "pacer_core.loading",
                    "pacer_core.default_target")),
    ("decoders", ("pacer_core.decoders",)),
    ("api", ("pacer_core", "pacer_core.api", "pacer_core.request", "pacer_core.methods", "pacer_core.trace",
             "pacer_core.long_drafts",
             "pacer_core.trace_checks", "pacer_core.atlas")),
    ("front doors", ("app", "pacer_core.ui", "pacer_core.bench", "pacer_core.bench_report", "pacer_core.training",
                     "pacer_core.testing", "benchmarks", "scripts")),
)
# Front doors that must not import one another (the app and its UI package are one door), except that a
# script may import the UI's modules to measure them (benchmarks/ui_overhead.py), as long as they load no gradio.
DOORS = {"app": "ui", "pacer_core.ui": "ui", "pacer_core.bench": "bench", "pacer_core.bench_report": "bench",
         "pacer_core.training": "training", "benchmarks": "scripts", "scripts": "scripts"}
ALLOWED_DOOR_IMPORTS = {("scripts", "ui")}
UI_PACKAGES = ("gradio", "plotly")


def source_files() -> dict[str, tuple[Path, bool]]:
    """Module name → (file, is_package) for every module the rules cover."""
    files = [ROOT / "app.py", *(ROOT / "pacer_core").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
             *(ROOT / "scripts").rglob("*.py")]
    modules = {}
    for path in files:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def suite_module_names() -> set[str]:
    return {"tests", *(path.stem for path in (ROOT / "tests").glob("*.py"))}


def layer_of(name: str) -> int | None:
    """Index into LAYERS of a project module, None for anything outside the project."""
    for index, (_, members) in enumerate(LAYERS):
        for member in members:
            if name == member or (member != "pacer_core" and name.startswith(member + ".")):
                return index
    return None


def door_of(name: str) -> str | None:
    return next((door for prefix, door in DOORS.items() if name == prefix or name.startswith(prefix + ".")), None)


def imported_names(module: str, is_package: bool, tree: ast.AST, known: set[str],
                   module_level_only: bool = False) -> set[str]:
    """Full names of what `module` imports; `from package import submodule` resolves to the submodule."""
    names = set()
    for node in _import_nodes(tree, module_level_only):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
        for alias in node.names:
            names.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return names


def _import_nodes(tree: ast.AST, module_level_only: bool):
    """Import statements; with module_level_only, only those that run when the module is imported."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if not (module_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
                pending.append(child)


def direct_violations(module: str, imports: set[str]) -> list[str]:
    """Upward imports, imports of another front door, and imports of the tests."""
    problems = []
    own_layer, own_door = layer_of(module), door_of(module)
    for name in sorted(imports):
        layer = layer_of(name)
        if name.split(".")[0] in suite_module_names():
            problems.append(f"{module} imports the tests ({name})")
        elif layer is not None and layer > own_layer:
            problems.append(f"{module} ({LAYERS[own_layer][0]}) imports {name} ({LAYERS[layer][0]}), a layer above")
        elif door_of(name) not in (None, own_door) and (own_door, door_of(name)) not in ALLOWED_DOOR_IMPORTS:
            problems.append(f"{module} imports {name}, another front door")
    return problems


def loaded_packages(start: str, graph: dict[str, set[str]]) -> set[str]:
    """Top-level names of the outside packages that importing `start` loads (its parent packages run too)."""
    pending, seen, outside = [*_with_parents(start, graph)], set(), set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for target in graph.get(name, ()):
            if target in graph or target.split(".")[0] in ("pacer_core", "app", "benchmarks", "scripts"):
                pending.extend(_with_parents(target, graph))
            else:
                outside.add(target.split(".")[0])
    return outside


def _with_parents(name: str, graph: dict[str, set[str]]) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts) + 1) if ".".join(parts[:end]) in graph]


def forbidden_packages(module: str) -> tuple[str, ...]:
    if module == "app" or module == "pacer_core.ui" or module.startswith("pacer_core.ui."):
        return ()
    return UI_PACKAGES if module.startswith("pacer_core") else ("gradio",)


def parsed_modules() -> dict[str, tuple[ast.AST, bool]]:
    return {name: (ast.parse(path.read_text(), str(path)), is_package)
            for name, (path, is_package) in source_files().items()}


def test_every_module_has_a_layer():
    unplaced = sorted(name for name in source_files() if layer_of(name) is None)
    assert not unplaced, f"add these modules to LAYERS in tests/test_layers.py: {unplaced}"


def test_imports_point_down_and_front_doors_stay_apart():
    modules = parsed_modules()
    problems = []
    for module, (tree, is_package) in sorted(modules.items()):
        problems += direct_violations(module, imported_names(module, is_package, tree, set(modules)))
    assert not problems, "\n".join(problems)


def test_the_library_and_the_scripts_load_no_ui_package():
    modules = parsed_modules()
    graph = {module: imported_names(module, is_package, tree, set(modules), module_level_only=True)
             for module, (tree, is_package) in modules.items()}
    problems = [f"importing {module} loads {package}"
                for module in sorted(modules)
                for package in sorted(loaded_packages(module, graph) & set(forbidden_packages(module)))]
    assert not problems, "\n".join(problems)


def test_the_rules_catch_a_bad_import():
    """The checks above can fail: a core module importing a decoder, the UI importing the bench CLI, a
    benchmark importing the tests, and a script loading gradio through a UI module are all reported."""
    known = {"pacer_core.sampling", "pacer_core.decoders", "pacer_core.decoders.base", "pacer_core.bench",
             "pacer_core.ui", "pacer_core.ui.layout"}

    def problems(module, source, is_package=False):
        return direct_violations(module, imported_names(module, is_package, ast.parse(source), known))

    assert problems("pacer_core.sampling", "def f():\n    from .decoders import base")
    assert problems("pacer_core.ui.measured", "from ..bench import parse_method")
    assert problems("benchmarks.smc_tv", "from tests.tiny import tiny_pair")
    assert not problems("pacer_core.decoders.base", "from .. import sampling")
    graph = {"benchmarks.x": {"pacer_core.ui.layout"}, "pacer_core.ui": set(), "pacer_core.ui.layout": {"gradio"}}
    assert loaded_packages("benchmarks.x", graph) == {"gradio"}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of imports between the graph's modules, each as the list of modules around it."""
    cycles, state = [], {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph.get(name, ())):
            if target not in graph:
                continue
            if state.get(target) == "open":
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_no_import_circle():
    modules = parsed_modules()
    graph = {module: {name for name in imported_names(module, is_package, tree, set(modules))
                      if name != module and not name.startswith(module + ".")}
             for module, (tree, is_package) in modules.items()}
    cycles = import_cycles(graph)
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_circle_check_finds_a_circle():
    graph = {"pacer_core.models": {"pacer_core.drafters"}, "pacer_core.drafters": {"pacer_core.models"},
             "pacer_core.kvcache": set()}
    assert import_cycles(graph) == [["pacer_core.drafters", "pacer_core.models", "pacer_core.drafters"]]
