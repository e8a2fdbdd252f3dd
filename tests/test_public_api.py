"""The public surface, pinned: a name added to or dropped from an ``__all__`` is a decision, made here.

``onnxsight.__all__`` is DESIGN.md's contract plus every error onnxsight
raises; the subpackages list what they offer beyond it (``onnxsight.exporter``:
the API for writing translations, CONTRIBUTING.md). Internals stay reachable
for onnxsight's own packages, but not at the top level.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback

import pytest

import onnxsight
from onnxsight import diagnostics, exporter, reports, rules, verification
from tests.sarif_check import check_sarif_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ERRORS = ["CaptureError", "CheckerError", "DecompositionError", "ExportError", "InvalidArgumentError",
          "TranslationError", "VerificationError", "WeightsChangedError", "WeightsError"]
CONTRACT = ["Diagnostic", "GenerationPrograms", "GenerationResult", "GraphBuilder", "Level", "Location",
            "ONNXProgram", "Tolerance", "Value", "VerificationResult", "__version__", "export", "export_generation",
            "fake_mode", "verify", "verify_generation", "verify_onnx"]


def test_top_level_all_is_the_contract_and_the_errors() -> None:
    assert sorted(onnxsight.__all__) == sorted(CONTRACT + ERRORS)
    assert len(set(onnxsight.__all__)) == len(onnxsight.__all__)


@pytest.mark.parametrize("package, names", [
    (exporter, ["CaptureError", "CheckerError", "DecompositionError", "ExportError", "GraphBuilder",
                "InvalidArgumentError", "ONNXProgram", "Registry", "TranslationError", "UnsupportedVariant", "Value",
                "WeightsError", "default_registry", "export", "translation"]),
    (verification, ["GenerationPrograms", "GenerationResult", "Tolerance", "VerificationError", "VerificationResult",
                    "verify", "verify_onnx"]),
    (diagnostics, ["Diagnostic", "Level", "Location"]),
    (rules, ["CATALOG", "Level", "Rule", "RuleDocs", "get"]),
], ids=lambda value: getattr(value, "__name__", ""))
def test_subpackage_all_is_pinned(package, names: list[str]) -> None:
    assert sorted(package.__all__) == sorted(names)


@pytest.mark.parametrize("package", [onnxsight, exporter, verification, diagnostics, rules, reports],
                         ids=lambda module: module.__name__)
def test_every_public_name_resolves_and_is_listed_by_dir(package) -> None:
    for name in package.__all__:
        assert getattr(package, name) is not None, name
    assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize("name, home", [
    ("export", "onnxsight.pipeline"),
    ("verify_generation", "onnxsight.pipeline"),
    ("export_generation", "onnxsight.pipeline"),
    ("GenerationResult", "onnxsight.verification"),
    ("ONNXProgram", "onnxsight.exporter"),
    ("GraphBuilder", "onnxsight.exporter"),
    ("Value", "onnxsight.exporter"),
    ("verify", "onnxsight.verification"),
    ("Tolerance", "onnxsight.verification"),
    ("Diagnostic", "onnxsight.diagnostics"),
    ("Level", "onnxsight.rules"),
    ("TranslationError", "onnxsight.exporter"),
    ("VerificationError", "onnxsight.verification"),
])
def test_top_level_names_are_the_subpackages_objects(name: str, home: str) -> None:
    assert getattr(onnxsight, name) is getattr(sys.modules[home], name)


@pytest.mark.parametrize("name, where_instead", [
    ("DiagnosticContext", "onnxsight.diagnostics"),
    ("Registry", "onnxsight.exporter"),
    ("default_registry", "onnxsight.exporter"),
    ("translation", "onnxsight.exporter"),
    ("RuntimeCheckError", None),      # never raised: removed
    ("AccuracyError", None),          # verify=True does not raise on a failed comparison
])
def test_internals_are_not_at_the_top_level(name: str, where_instead: str | None) -> None:
    assert name not in dir(onnxsight)
    with pytest.raises(AttributeError, match=f"module 'onnxsight' has no attribute '{name}'"):
        getattr(onnxsight, name)
    if where_instead is None:
        assert not hasattr(exporter, name)
    else:
        assert getattr(sys.modules[where_instead], name) is not None


def test_the_core_export_takes_a_registry_and_the_public_one_does_not() -> None:
    import inspect

    assert "registry" in inspect.signature(exporter.export).parameters
    assert "registry" not in inspect.signature(onnxsight.export).parameters


@pytest.mark.parametrize("name", ERRORS)
def test_errors_present_themselves_as_onnxsight_names(name: str) -> None:
    cls = getattr(onnxsight, name)
    assert issubclass(cls, RuntimeError)   # as torch.onnx's errors: an `except RuntimeError` moved over still catches
    assert cls.__module__ == "onnxsight"
    assert repr(cls) == f"<class 'onnxsight.{name}'>"
    if name not in ("VerificationError", "WeightsChangedError"):   # raised by verify() / by using a program
        assert issubclass(cls, onnxsight.ExportError)


@pytest.mark.parametrize("name", ERRORS)
def test_errors_pickle_by_their_public_name(name: str) -> None:
    """pickle finds a class by ``__module__`` + name: ``onnxsight.<Name>`` must resolve to the same class."""
    import pickle

    if name == "WeightsChangedError":
        error = onnxsight.WeightsChangedError(["fc.weight"])
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error) and again.changed == ["fc.weight"]
        return
    error = getattr(onnxsight, name)("summary")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again).startswith("summary")


def test_a_traceback_names_the_public_error() -> None:
    try:
        raise onnxsight.TranslationError("Unsupported could not be translated to ONNX")
    except onnxsight.ExportError as exc:
        last = traceback.format_exception(exc)[-1]
    assert last == "onnxsight.TranslationError: Unsupported could not be translated to ONNX\n"


def test_every_raised_export_error_is_public() -> None:
    """Each ExportError subclass onnxsight defines is in ``onnxsight.__all__``: none is raised under a private name."""
    from onnxsight.exporter import _errors

    defined = {name for name, value in vars(_errors).items()
               if isinstance(value, type) and issubclass(value, onnxsight.ExportError)}
    assert defined == set(ERRORS) - {"VerificationError", "WeightsChangedError"}


def test_write_sarif_works_right_after_import_onnxsight(tmp_path) -> None:
    """README: ``onnxsight.reports.write_sarif(error.diagnostics, path)``; reports is never imported by hand."""
    path = tmp_path / "out.sarif"
    code = (
        "import onnxsight\n"
        "from onnxsight.diagnostics import DiagnosticContext\n"
        "ctx = DiagnosticContext()\n"
        "ctx.emit(onnxsight.rules.UNSUPPORTED_OP, op='aten.special_bessel_j0.default')\n"
        f"print(onnxsight.reports.write_sarif(ctx.diagnostics, {str(path)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(path)
    log = check_sarif_file(str(path), "public_api_write_sarif")
    (result,) = log["runs"][0]["results"]
    assert result["ruleId"] == "OPS002"
    assert "aten.special_bessel_j0.default" in json.dumps(result["message"])
