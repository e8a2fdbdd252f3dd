"""SARIF output: structure GitHub and VS Code need, robustness to bad input, fingerprints, baselines, merging."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

import onnxsight
from onnxsight import rules
from onnxsight.diagnostics import Diagnostic, DiagnosticContext, Level, Location
from onnxsight.reports.sarif import LINE_HASH, RESULT_HASH, merge_sarif, to_sarif, write_sarif
from tests.sarif_check import check_sarif, check_sarif_file

HERE = os.path.abspath(__file__)


def _line(marker: str) -> int:
    with open(HERE, encoding="utf-8") as handle:
        numbers = [n for n, text in enumerate(handle, 1) if text.rstrip().endswith(marker)]
    assert len(numbers) == 1, marker
    return numbers[0]


@torch.library.custom_op("onnxsight_sarif::first", mutates_args=())
def _first(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_first.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("onnxsight_sarif::second", mutates_args=())
def _second(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@_second.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class TwoCustomOps(torch.nn.Module):
    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        y = torch.ops.onnxsight_sarif.first(x)  # @first-op
        z = torch.ops.onnxsight_sarif.second(y)  # @second-op
        return z * scale


def _diag(rule: rules.Rule = rules.UNSUPPORTED_OP, *, location: object = None, stack: tuple = (),
          module: str | None = None, properties: dict | None = None, level: Level | None = None,
          **fields: object) -> Diagnostic:
    ctx = DiagnosticContext()
    fields = fields or {"op": "aten.sin.default"}
    return ctx.emit(rule, location=location, stack=stack, module=module, properties=properties, level=level,
                    **fields)


# -- the "done when" --------------------------------------------------------------------------
def test_two_custom_ops_and_baked_float_fail_with_both_ops_and_a_valid_sarif(tmp_path: object) -> None:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(TwoCustomOps(), (torch.randn(4), 0.5))  # @export-call
    message = str(info.value)
    first, second = _line("# @first-op"), _line("# @second-op")
    assert f"OPS001 custom operator onnxsight_sarif.first.default has no ONNX translation (1 call) ({HERE}:{first})" in message
    assert f"OPS001 custom operator onnxsight_sarif.second.default has no ONNX translation (1 call) ({HERE}:{second})" in message
    path = write_sarif(info.value.diagnostics, os.path.join(str(tmp_path), "done.sarif"), record=info.value.record)
    log = check_sarif_file(path, "done_when_two_custom_ops")
    results = log["runs"][0]["results"]
    errors = [r for r in results if r["level"] == "error"]
    warnings = [r for r in results if r["level"] == "warning"]
    assert [(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in errors] == [
        ("OPS001", first), ("OPS001", second)]
    assert [r["ruleId"] for r in warnings] == ["VAL001"]
    assert warnings[0]["locations"][0]["physicalLocation"]["region"]["startLine"] == _line("# @export-call")
    assert "scale" in warnings[0]["message"]["text"]


# -- structure --------------------------------------------------------------------------------------
def test_results_have_explicit_levels_rule_index_and_relative_uris() -> None:
    here = Location(HERE, 3, "f", "code")
    diags = [_diag(rules.UNSUPPORTED_OP, location=here),
             _diag(rules.PYTHON_SCALAR_BAKED, location=here, input="s", type="float", value="0.5"),
             _diag(rules.EDGE_CASE_SEMANTICS, location=here, op="aten.fmod", detail="sign")]
    log = check_sarif(to_sarif(diags, source_root=os.path.dirname(os.path.dirname(HERE))), "structure")
    run = log["runs"][0]
    assert log["version"] == "2.1.0" and "$schema" in log
    driver = run["tool"]["driver"]
    assert driver["name"] == "onnxsight" and driver["version"] and driver["informationUri"].startswith("https://")
    assert [r["level"] for r in run["results"]] == ["error", "warning", "note"]
    for result in run["results"]:
        rule = driver["rules"][result["ruleIndex"]]
        assert rule["id"] == result["ruleId"]
        assert rule["helpUri"].endswith(f"docs/rules/{rule['id']}.md")
        assert rule["help"]["markdown"] and rule["help"]["text"] and rule["shortDescription"]["text"]
        assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
        physical = result["locations"][0]["physicalLocation"]
        assert physical["artifactLocation"] == {"uri": "reports/test_sarif.py", "uriBaseId": "SRCROOT"}
        assert physical["region"]["startLine"] == 3
        assert set(result["partialFingerprints"]) == {LINE_HASH, RESULT_HASH}
    assert all(v["uri"].startswith("file:///") and v["uri"].endswith("/") for v in run["originalUriBaseIds"].values())
    assert run["invocations"][0]["executionSuccessful"] is True
    assert run["properties"]["metrics"]["errors"] == 1


def test_code_flow_logical_location_and_properties() -> None:
    stack = (Location("/usr/lib/python3/runpy.py", 10, "run"), Location(HERE, 20, "forward", "y = f(x)"),
             Location("<frozen importlib._bootstrap>", 5, "_call"))
    diag = _diag(location=stack[1], stack=stack, module="encoder.layers.0.attn",
                 properties={"fx_node": "sin_1", "max_abs_diff": 0.5, "nan": float("nan"), "shape": (2, 3)})
    result = check_sarif(to_sarif([diag]), "code_flow")["runs"][0]["results"][0]
    steps = result["codeFlows"][0]["threadFlows"][0]["locations"]
    assert len(steps) == 3 and steps[1]["importance"] == "essential"
    assert "physicalLocation" not in steps[2]["location"]          # not a file: message only
    assert result["logicalLocations"] if "logicalLocations" in result else result["locations"][0]["logicalLocations"]
    logical = result["locations"][0]["logicalLocations"][0]
    assert logical == {"name": "attn", "fullyQualifiedName": "encoder.layers.0.attn", "kind": "module"}
    assert result["properties"]["max_abs_diff"] == 0.5 and result["properties"]["nan"] == "nan"


# -- bad input ----------------------------------------------------------------------------------------
HOSTILE = "bad \x00\x07\x1b[31m \ud800 `*_<script>|</script>` \\ \"quoted\" \u202e end"


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no")


@pytest.mark.parametrize("case", ["missing-field", "hostile-text", "no-file", "bad-line", "weird-stack",
                                  "string-location", "unprintable", "outside-root"])
def test_bad_input_never_crashes_and_stays_valid(case: str, tmp_path: object) -> None:
    kwargs: dict = {}
    if case == "missing-field":
        diag = _diag(rules.OUTPUT_MISMATCH, output="y")                       # most fields missing
        assert "<reference?>" in diag.message
    elif case == "hostile-text":
        diag = _diag(rules.TRANSLATION_FAILED, location=Location(HERE, 1, HOSTILE, HOSTILE), op=HOSTILE,
                     error_type=HOSTILE, error=HOSTILE, properties={HOSTILE: HOSTILE}, module=HOSTILE)
        assert "\x00" not in diag.message and "\ud800" not in diag.message
    elif case == "no-file":
        diag = _diag(location=Location("<string>", 3))
    elif case == "bad-line":
        diag = _diag(location=Location(HERE, "abc", None, None))             # type: ignore[arg-type]
    elif case == "weird-stack":
        diag = _diag(location=Location(HERE, -4), stack=(Location("", None), Location("x.py\x00", 2), "nonsense"))
    elif case == "string-location":
        diag = _diag(location=os.path.join(str(tmp_path), "weights.data"))
    elif case == "unprintable":
        diag = _diag(op=_Unprintable(), properties={"obj": _Unprintable(), "b": b"\xff"})
    else:
        diag = _diag(location=Location(os.path.join(str(tmp_path), "dir with space", "m#odel.py"), 7))
        kwargs = {"source_root": os.path.dirname(HERE)}
    path = write_sarif([diag], os.path.join(str(tmp_path), "bad.sarif"), **kwargs)
    log = check_sarif_file(path, f"bad_input_{case}")
    result = log["runs"][0]["results"][0]
    assert result["level"] == "error" and result["message"]["text"]
    for location in result.get("locations", []):
        region = location.get("physicalLocation", {}).get("region")
        assert region is None or region["startLine"] >= 1
    if case == "outside-root":
        artifact = result["locations"][0]["physicalLocation"]["artifactLocation"]
        assert artifact["uri"] == "m%23odel.py" and artifact["uriBaseId"] != "SRCROOT"
        assert log["runs"][0]["originalUriBaseIds"][artifact["uriBaseId"]]["uri"].endswith("dir%20with%20space/")


def test_parse_stack_trace_in_unexpected_format_gives_no_location() -> None:
    ctx = DiagnosticContext()

    class Node:
        name, target = "n", "aten.sin"
        meta = {"stack_trace": "garbage\n  at line ?\n File x, line y", "nn_module_stack": ["not", "a", "dict"]}
    diag = ctx.emit(rules.UNSUPPORTED_OP, node=Node(), op="aten.sin")
    assert diag.location is None and diag.stack == () and diag.module_path is None
    check_sarif(to_sarif([diag]), "unexpected_stack_format")


# -- fingerprints and baselines -------------------------------------------------------------------
def _copy_tree(tmp: str, name: str, shift: int) -> str:
    root = os.path.join(tmp, name)
    os.makedirs(os.path.join(root, "pkg"))
    with open(os.path.join(root, "pkg", "model.py"), "w") as handle:
        handle.write("\n" * shift + "y = torch.special.zeta(x)\n")
    return root


def test_fingerprints_are_stable_across_machines_and_line_shifts(tmp_path: object) -> None:
    logs = []
    for name, shift in (("a", 0), ("b", 5)):
        root = _copy_tree(str(tmp_path), name, shift)
        loc = Location(os.path.join(root, "pkg", "model.py"), shift + 1, "forward", "y = torch.special.zeta(x)")
        logs.append(to_sarif([_diag(location=loc), _diag(location=loc)], source_root=root))
    first, second = (log["runs"][0]["results"] for log in logs)
    assert [r["partialFingerprints"] for r in first] == [r["partialFingerprints"] for r in second]
    assert first[0]["partialFingerprints"][LINE_HASH].endswith(":1")
    assert first[1]["partialFingerprints"][LINE_HASH].endswith(":2")


def test_baseline_state_new_unchanged_updated_absent() -> None:
    loc = Location(HERE, 5, "f", "z = g(y)")
    old = to_sarif([_diag(location=loc, op="aten.a"), _diag(rules.UNUSED_INPUT, location=loc, input="m"),
                    _diag(rules.OUTPUT_MISMATCH, location=loc, output="y", max_abs_diff="1e-3")])
    new = to_sarif([_diag(location=loc, op="aten.a"), _diag(rules.OUTPUT_MISMATCH, location=loc, output="y",
                                                            max_abs_diff="2e-3"),
                    _diag(rules.UNSUPPORTED_CUSTOM_OP, location=loc, op="x.y")], baseline=old)
    log = check_sarif(new, "baseline")
    states = {(r["ruleId"], r["baselineState"]) for r in log["runs"][0]["results"]}
    assert states == {("OPS002", "unchanged"), ("ACC001", "updated"), ("OPS001", "new"), ("IO001", "absent")}
    driver = log["runs"][0]["tool"]["driver"]
    assert all(driver["rules"][r["ruleIndex"]]["id"] == r["ruleId"] for r in log["runs"][0]["results"])


# -- invocations --------------------------------------------------------------------------------------
def test_crash_notifications_mark_execution_unsuccessful() -> None:
    try:
        raise ValueError("boom \x01")
    except ValueError as exc:
        error = exc
    internal = _diag(rules.INTERNAL_ERROR, stage="translate", error_type="KeyError", error="'x'")
    log = check_sarif(to_sarif([internal], notifications=[error, "plain text", {"message": "m", "level": "bogus"}]),
                      "notifications")
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    notes = invocation["toolExecutionNotifications"]
    assert len(notes) == 4 and all(n["level"] == "error" for n in notes)
    assert notes[0]["exception"]["kind"] == "ValueError" and notes[0]["exception"]["stack"]["frames"]


def test_record_properties_are_json(tmp_path: object) -> None:
    from onnxsight.exporter._record import ExportRecord

    record = ExportRecord(model_name="M")
    with record.stage("capture"):
        pass
    record.facts["weights"] = float("inf")
    log = check_sarif(to_sarif([], record=record), "record_only")
    assert log["runs"][0]["results"] == [] and log["runs"][0]["tool"]["driver"]["rules"] == []
    assert log["runs"][0]["invocations"][0]["properties"]["record"]["stages"][0]["name"] == "capture"


# -- merge and write ----------------------------------------------------------------------------------
def test_merge_renumbers_rules_and_renames_clashing_bases(tmp_path: object) -> None:
    a = _copy_tree(str(tmp_path), "a", 0)
    b = _copy_tree(str(tmp_path), "b", 0)
    log_a = to_sarif([_diag(location=Location(os.path.join(a, "pkg", "model.py"), 1))], source_root=a)
    log_b = to_sarif([_diag(rules.UNUSED_INPUT, input="m"),
                      _diag(location=Location(os.path.join(b, "pkg", "model.py"), 1))], source_root=b)
    merged = check_sarif(merge_sarif([log_a, log_b, {}]), "merged")
    assert len(merged["runs"]) == 1
    run = merged["runs"][0]
    assert [r["ruleId"] for r in run["results"]] == ["OPS002", "IO001", "OPS002"]
    assert all(run["tool"]["driver"]["rules"][r["ruleIndex"]]["id"] == r["ruleId"] for r in run["results"])
    bases = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"] for r in run["results"]
             if "locations" in r]
    assert len(set(bases)) == 2 and all(base in run["originalUriBaseIds"] for base in bases)


def test_write_is_atomic_and_leaves_no_temporary_files(tmp_path: object) -> None:
    directory = os.path.join(str(tmp_path), "out")
    path = write_sarif([_diag()], os.path.join(directory, "x.sarif"))
    assert os.listdir(directory) == ["x.sarif"]
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle)["runs"][0]["results"][0]["ruleId"] == "OPS002"
    shutil.rmtree(directory)


def test_program_write_sarif_on_success(tmp_path: object) -> None:
    class Add(torch.nn.Module):
        def forward(self, x: torch.Tensor, unused: torch.Tensor) -> torch.Tensor:
            return x + 1

    program = onnxsight.export(Add(), (torch.randn(2), torch.randn(2)))
    log = check_sarif_file(program.write_sarif(os.path.join(str(tmp_path), "ok.sarif")), "program_success")
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["IO001"]
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is True
