"""DESIGN.md's import table, pinned: every module under onnxsight/ is parsed and its imports checked.

The table says which onnxsight packages each package may import; on top of
it: no package imports another's private (``_``-prefixed) modules or names,
reaches into ONNXProgram's private attributes, or loads torch/onnxruntime
where the design keeps them out. Imports inside functions count as much as
module-level ones: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "onnxsight"
PACKAGES = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists())
TOP_MODULES = sorted(p.stem for p in ROOT.glob("*.py") if not p.stem.startswith("_"))
# Private modules beside the root __init__, and the layer each one belongs to. Foundation modules
# (onnxsight/_lazy.py) are plumbing under every layer: they import nothing of ours, and all may import them.
ROOT_HELPERS = {"_lazy": "foundation", "_cli_inputs": "cli", "_cli_parser": "cli", "_cli_generation": "cli"}
FOUNDATION = frozenset(name for name, layer in ROOT_HELPERS.items() if layer == "foundation")
EVERYTHING = frozenset(PACKAGES) | frozenset(TOP_MODULES) | {"onnxsight"}

# DESIGN.md, "Packages": the onnxsight packages each one may import ("onnxsight" is the root facade).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "rules": frozenset(),
    "diagnostics": frozenset({"rules"}),
    "exporter": frozenset({"rules", "diagnostics"}),
    "verification": frozenset({"exporter", "rules", "diagnostics"}),
    "reports": frozenset({"rules", "diagnostics"}),
    "pipeline": frozenset({"exporter", "verification", "reports", "rules", "diagnostics"}),
    "zoo": EVERYTHING - {"cli", "demo"},
    "cli": EVERYTHING,
    "demo": EVERYTHING,          # the demo script sits beside the CLI
    "onnxsight": EVERYTHING,     # __init__/__main__: the facade over everything
    **{helper: frozenset() for helper in FOUNDATION},
}
# The root facade re-exports each name from the module that defines it, so that
# ``from onnxsight import ExportError`` does not load torch through exporter/__init__;
# it is the namespace's own front door, not another package reaching in.
MAY_IMPORT_PRIVATE = frozenset({"onnxsight"})
# Names of the root package any module may read (set before the facade imports anything).
ROOT_METADATA = frozenset({"__version__"})
# The packages of records and their rendering: neither torch nor onnxruntime, at any depth.
NO_TORCH = ("rules", "diagnostics", "reports")
# Where onnxruntime may be imported at all (a package, or one file and how).
ONNXRUNTIME_ALLOWED = {"verification": "anywhere", "exporter/program/_onnx_program.py": "inside functions"}
# A string naming one of our modules (an importlib.import_module table entry) counts as an import.
LAZY_TABLE = re.compile(r"^onnxsight(\.[A-Za-z_]\w*)+$")


@dataclass(frozen=True)
class Import:
    module: str          # dotted, absolute
    names: tuple[str, ...]
    line: int
    in_function: bool


def layer_of(name: str) -> str:
    """The layer of ``onnxsight.<name>``: a package, a top-level module, or the layer a root helper serves."""
    helper = ROOT_HELPERS.get(name)
    return name if helper is None or helper == "foundation" else helper


def package_of(path: Path) -> str:
    """The layer a source file belongs to: its top-level package, a top-level module's stem, or the root."""
    parts = path.relative_to(ROOT).parts
    if len(parts) > 1:
        return parts[0]
    return "onnxsight" if parts[0] in ("__init__.py", "__main__.py") else layer_of(Path(parts[0]).stem)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, source: str | None = None) -> list[Import]:
    """Every import statement (and lazy-import table entry) of one file, with relative imports resolved."""
    text = path.read_text(encoding="utf-8") if source is None else source
    tree = ast.parse(text, filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend(Import(a.name, (), child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                found.append(Import(base, tuple(a.name for a in child.names), child.lineno, in_function))
            elif isinstance(child, ast.Constant) and isinstance(child.value, str) and LAZY_TABLE.match(child.value):
                found.append(Import(child.value, (), child.lineno, in_function))  # importlib.import_module tables
            visit(child, nested)

    visit(tree, False)
    return found


def is_package_or_module(dotted: str) -> bool:
    path = ROOT.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def targets(imp: Import) -> list[tuple[str, str]]:
    """(layer, dotted name) for each onnxsight thing an import reaches."""
    parts = imp.module.split(".")
    if parts[0] != "onnxsight":
        return []
    if len(parts) > 1:
        return [(layer_of(parts[1]), imp.module + (f".{n}" if n not in ("", "*") else "")) for n in imp.names or ("",)]
    out = []
    for name in imp.names or ("",):
        if name in ROOT_METADATA:
            continue
        layer = name if name and is_package_or_module(f"onnxsight.{name}") else "onnxsight"
        out.append((layer, f"onnxsight.{name}" if name else "onnxsight"))
    return out


SOURCES = sorted(ROOT.rglob("*.py"))
assert SOURCES, "no sources found under onnxsight/"


def is_private(dotted: str) -> bool:
    """Whether ``onnxsight.<package>.<rest>`` names a ``_``-prefixed module or name inside the package."""
    return any(p.startswith("_") and not p.startswith("__") for p in dotted.split(".")[2:])


def layer_violations(path: Path, source: str | None = None) -> list[str]:
    mine = package_of(path)
    allowed = MAY_IMPORT[mine] | {mine} | (frozenset() if mine in FOUNDATION else FOUNDATION)
    out = []
    for imp in imports_of(path, source):
        for layer, dotted in targets(imp):
            where = f"{path.relative_to(ROOT.parent)}:{imp.line}"
            if layer not in allowed:
                out.append(f"{where}: {mine} imports {dotted} ({layer} is not in its row)")
            elif layer != mine and mine not in MAY_IMPORT_PRIVATE and is_private(dotted):
                out.append(f"{where}: {mine} imports another package's private {dotted}")
    return out


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_package_imports_only_what_design_allows(package: str) -> None:
    files = [p for p in SOURCES if package_of(p) == package]
    assert files or package in ("onnxsight",), f"no sources for {package}"
    violations = [v for path in files for v in layer_violations(path)]
    assert not violations, "\n".join(violations)


def test_every_package_has_a_row() -> None:
    """A new package or root-level module needs a row (and a private one a line in ROOT_HELPERS)."""
    unknown = sorted(p.stem for p in ROOT.glob("_*.py") if p.stem not in ("__init__", "__main__", *ROOT_HELPERS))
    assert not unknown, f"root-level private modules without a layer in ROOT_HELPERS: {unknown}"
    assert {package_of(p) for p in SOURCES} | FOUNDATION <= set(MAY_IMPORT)
    assert set(PACKAGES) | set(TOP_MODULES) | {"onnxsight"} <= set(MAY_IMPORT)


def third_party_uses(path: Path, top: str) -> list[Import]:
    return [i for i in imports_of(path) if i.module.split(".")[0] == top
            or (i.module == "" and top in i.names)]


@pytest.mark.parametrize("package", NO_TORCH)
@pytest.mark.parametrize("library", ["torch", "onnxruntime"])
def test_records_packages_never_load_torch_or_onnxruntime(package: str, library: str) -> None:
    uses = [f"{p.relative_to(ROOT.parent)}:{i.line}" for p in SOURCES if package_of(p) == package
            for i in third_party_uses(p, library)]
    assert not uses, f"{package} imports {library}: {uses}"


def test_onnxruntime_only_in_verification_and_the_programs_lazy_runner() -> None:
    uses = []
    for path in SOURCES:
        rel = path.relative_to(ROOT).as_posix()
        rule = ONNXRUNTIME_ALLOWED.get(package_of(path)) or ONNXRUNTIME_ALLOWED.get(rel)
        for imp in third_party_uses(path, "onnxruntime"):
            if rule == "anywhere" or (rule == "inside functions" and imp.in_function):
                continue
            uses.append(f"{rel}:{imp.line}")
    assert not uses, f"onnxruntime imported outside verification: {uses}"


def program_private_attributes() -> set[str]:
    """``self._x`` attributes ONNXProgram sets: its private state, for the exporter's eyes only."""
    tree = ast.parse((ROOT / "exporter" / "program" / "_onnx_program.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ONNXProgram")
    return {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "self" and n.attr.startswith("_") and not n.attr.startswith("__")}


def test_onnx_program_private_state_stays_in_the_exporter() -> None:
    private = program_private_attributes()
    assert "_translated" in private
    uses = []
    for path in SOURCES:
        if package_of(path) == "exporter":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        uses += [f"{path.relative_to(ROOT.parent)}:{n.lineno}: .{n.attr}" for n in ast.walk(tree)
                 if isinstance(n, ast.Attribute) and n.attr in private
                 and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))]
    assert not uses, "\n".join(uses)


@pytest.mark.parametrize(("source", "expected"), [
    ("from onnxsight.exporter.translate._nodes import op_display", ["private onnxsight.exporter.translate._nodes.op_display"]),
    ("from onnxsight.exporter import op_display", []),
    ("from onnxsight.reports import write_sarif", ["onnxsight.reports.write_sarif (reports is not in its row)"]),
    ("from onnxsight import __version__, rules", []),
    ("import onnxsight", ["onnxsight (onnxsight is not in its row)"]),
    ("_LAZY = {'x': 'onnxsight.pipeline'}", ["onnxsight.pipeline (pipeline is not in its row)"]),
    ("from . import _graph", []),
])
def test_the_checker_itself(source: str, expected: list[str]) -> None:
    """The checker sees what it should, as if the line were in verification/_probe.py."""
    found = layer_violations(ROOT / "verification" / "_probe.py", source)
    assert [v.split(": ", 1)[-1].replace("verification imports ", "").replace("another package's ", "")
            for v in found] == expected


# The exporter's stages (DESIGN.md, "Packages"): each subpackage imports only the stages before it and
# the shared modules beside them (GraphBuilder, the registry, dtypes, errors, records). ``ops/`` holds
# the translate stage's translations: it comes before ``translate/`` (whose translator calls them) and
# after ``decompose/``. ``_api.py`` composes the stages and may import them all; the registry names the
# ``ops`` modules in its lazy table (OP_MODULES), which is the one way the shared modules reach a stage.
EXPORTER = ROOT / "exporter"
STAGES = ("inputs", "capture", "decompose", "ops", "translate", "optimize", "check", "program")
SHARED = frozenset({"_builder", "_registry", "_dtypes", "_errors", "_record"})
SHARED_MAY_REACH = {"_registry": frozenset({"ops"})}


def exporter_part(dotted: str) -> str | None:
    """The stage (or shared module, or ``_api``) of ``onnxsight.exporter.<part>...``; None outside the exporter."""
    parts = dotted.split(".")
    if parts[:2] != ["onnxsight", "exporter"]:
        return None
    return parts[2] if len(parts) > 2 else "__init__"


def stage_violations(path: Path, source: str | None = None) -> list[str]:
    mine = exporter_part(module_name(path)) if path.name != "__init__.py" or path.parent != EXPORTER else "__init__"
    if mine in ("_api", "__init__"):
        return []
    if mine in SHARED:
        allowed = SHARED | SHARED_MAY_REACH.get(mine, frozenset())
    else:
        allowed = SHARED | set(STAGES[: STAGES.index(mine) + 1])
    out = []
    for imp in imports_of(path, source):
        for _, dotted in targets(imp):
            part = exporter_part(dotted)
            if part is not None and part != "__init__" and part not in allowed:
                out.append(f"{path.relative_to(ROOT.parent)}:{imp.line}: exporter stage {mine} imports {dotted}")
    return out


def test_exporter_files_are_in_a_stage_or_shared() -> None:
    stray = sorted(p.relative_to(EXPORTER).as_posix() for p in EXPORTER.glob("*.py")
                   if p.stem not in SHARED | {"_api", "__init__"})
    folders = sorted(p.name for p in EXPORTER.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert not stray, f"exporter modules outside a stage folder: {stray}"
    assert folders == sorted(STAGES)


@pytest.mark.parametrize("stage", [*STAGES, *sorted(SHARED)])
def test_exporter_stage_imports_only_earlier_stages(stage: str) -> None:
    files = sorted((EXPORTER / stage).rglob("*.py")) if stage in STAGES else [EXPORTER / f"{stage}.py"]
    assert files
    violations = [v for path in files for v in stage_violations(path)]
    assert not violations, "\n".join(violations)


@pytest.mark.parametrize(("where", "source", "expected"), [
    ("capture/_probe.py", "from onnxsight.exporter.translate._nodes import op_display", 1),
    ("capture/_probe.py", "from onnxsight.exporter.inputs._fake import has_data", 0),
    ("capture/_probe.py", "from onnxsight.exporter._builder import GraphBuilder", 0),
    ("ops/_probe.py", "from onnxsight.exporter.program._onnx_program import ONNXProgram", 1),
    ("_builder.py", "from onnxsight.exporter.ops import shape", 1),
    ("_registry.py", "_T = ('onnxsight.exporter.ops.shape',)", 0),
    ("program/_probe.py", "from onnxsight.exporter.check._type_constraints import require_outputs", 0),
])
def test_the_stage_checker_itself(where: str, source: str, expected: int) -> None:
    assert len(stage_violations(EXPORTER / where, source)) == expected
