"""SARIF 2.1.0 logs of diagnostics, built with sarif-om; opens in VS Code and passes GitHub's ingestion rules.

- ``to_sarif(diagnostics, ...)`` -> the log as a JSON-ready dict
- ``write_sarif(diagnostics, path, ...)`` -> writes it atomically, returns the path
- ``merge_sarif(logs)`` -> one log with one run holding every log's results (the zoo's merged log)

The log has ``tool.driver.rules`` for the rules the results use (docs from the
catalog), results with an explicit ``level``, a ``ruleIndex``, a relative
``uri`` with ``uriBaseId`` (``originalUriBaseIds`` end in ``/``), the Python
stack as a code flow, the ``nn_module_stack`` path as a logical location and
``partialFingerprints`` that do not depend on the machine, the absolute paths
or line numbers, so ``baselineState`` can be computed between nightly runs.
"""

from __future__ import annotations

import copy
import json
import os
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

import sarif_om

from onnxsight import __version__, rules
from onnxsight.diagnostics import (
    Diagnostic,
    Level,
    Location,
    as_location,
    caller_location,
    traceback_frames,
)
from onnxsight.reports import _sarif_parts as parts
from onnxsight.reports._files import write_text_atomic
from onnxsight.rules import Rule, clean_text
from onnxsight.rules.docs import render_markdown, render_text

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/onnxsight/onnxsight"
LINE_HASH = "primaryLocationLineHash"
RESULT_HASH = "onnxsightResult/v1"

Notification = BaseException | str | Mapping[str, Any]


def to_sarif(diagnostics: Iterable[Diagnostic], *, record: Any = None, execution_successful: bool = True,
             notifications: Sequence[Notification] = (), baseline: Mapping[str, Any] | None = None,
             source_root: str | os.PathLike | None = None) -> dict[str, Any]:
    """One SARIF run for ``diagnostics``; ``baseline`` (an earlier log) sets each result's ``baselineState``.

    ``record`` (an ExportRecord) adds stage timings and facts to the run's
    properties; ``notifications`` (exceptions, strings or
    ``{"message", "level"}`` dicts) become ``toolExecutionNotifications``.
    Paths under ``source_root`` (default: the working directory) are relative
    to ``SRCROOT``.
    """
    diagnostics = [d for d in diagnostics if isinstance(d, Diagnostic)]
    bases = parts.UriBases(os.fspath(source_root) if source_root is not None else os.getcwd())
    fallback = _fallback_location(diagnostics, record)
    results = _results(diagnostics, bases, fallback)
    if baseline is not None:
        results += _apply_baseline(results, baseline)
    used: list[Rule] = []
    for result in results:
        rule = _rule_of(result)
        if rule not in used:
            used.append(rule)
    used.sort(key=lambda r: r.code)
    for result in results:
        result.rule_index = used.index(_rule_of(result))
    internal = [d for d in diagnostics if d.rule is rules.INTERNAL_ERROR and d.level is Level.ERROR]
    invocation = sarif_om.Invocation(
        execution_successful=bool(execution_successful) and not internal,
        tool_execution_notifications=[_notification(n, bases) for n in (*notifications, *internal)] or None,
        properties=_record_properties(record))
    run = sarif_om.Run(
        tool=sarif_om.Tool(driver=sarif_om.ToolComponent(
            name="onnxsight", version=__version__, semantic_version=__version__,
            information_uri=INFORMATION_URI, rules=[_descriptor(rule) for rule in used])),
        results=results, invocations=[invocation], column_kind="unicodeCodePoints",
        original_uri_base_ids=bases.original_uri_base_ids(),
        properties={"metrics": _metrics(diagnostics)})
    log = parts.serialize(sarif_om.SarifLog(version="2.1.0", schema_uri=SCHEMA_URI, runs=[run]))
    return {"$schema": log.pop("$schema"), "version": log.pop("version"), **log}


def write_sarif(diagnostics: Iterable[Diagnostic], path: str | os.PathLike, *, record: Any = None,
                **options: Any) -> str:
    """Write ``to_sarif(diagnostics, ...)`` to ``path`` atomically (a temporary file, then rename)."""
    log = to_sarif(diagnostics, record=record, **options)
    return write_log(log, path)


def write_log(log: Mapping[str, Any], path: str | os.PathLike) -> str:
    """Write a SARIF dict as UTF-8 JSON, atomically; returns the path."""
    return write_text_atomic(path, json.dumps(log, indent=1, ensure_ascii=False, allow_nan=False))


def merge_sarif(logs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Merge SARIF logs (dicts) into one log with a single onnxsight run.

    Rules are united and ``ruleIndex`` renumbered; URI base ids that collide
    with a different folder are renamed in the results that use them;
    invocations are kept, and run properties go under ``properties.runs``.
    """
    rules_out: list[dict[str, Any]] = []
    rule_index: dict[str, int] = {}
    bases_out: dict[str, dict[str, Any]] = {}
    results: list[dict[str, Any]] = []
    invocations: list[dict[str, Any]] = []
    run_properties: list[Any] = []
    for log in logs:
        for run in (log or {}).get("runs", []) or []:
            run = copy.deepcopy(run)
            renames = _merge_bases(run.get("originalUriBaseIds") or {}, bases_out)
            driver_rules = ((run.get("tool") or {}).get("driver") or {}).get("rules") or []
            for rule in driver_rules:
                if rule.get("id") not in rule_index:
                    rule_index[rule["id"]] = len(rules_out)
                    rules_out.append(rule)
            for result in run.get("results") or []:
                rule_id = result.get("ruleId") or (driver_rules[result["ruleIndex"]]["id"]
                                                   if 0 <= result.get("ruleIndex", -1) < len(driver_rules) else None)
                if rule_id in rule_index:
                    result["ruleId"], result["ruleIndex"] = rule_id, rule_index[rule_id]
                else:
                    result.pop("ruleIndex", None)
                _rename_bases(result, renames)
                results.append(result)
            invocations += run.get("invocations") or []
            if run.get("properties"):
                run_properties.append(run["properties"])
    merged_run: dict[str, Any] = {
        "tool": {"driver": {"name": "onnxsight", "version": __version__, "semanticVersion": __version__,
                            "informationUri": INFORMATION_URI, "rules": rules_out}},
        "results": results, "columnKind": "unicodeCodePoints",
        "invocations": invocations or [{"executionSuccessful": True}]}
    if bases_out:
        merged_run["originalUriBaseIds"] = bases_out
    if run_properties:
        merged_run["properties"] = {"runs": run_properties}
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [merged_run]}


# -- results --------------------------------------------------------------------------------------
def _fallback_location(diagnostics: list[Diagnostic], record: Any) -> Location:
    """Where results without a file location are shown (GitHub requires a location on every result).

    The first file location among the diagnostics, else the user's code calling
    onnxsight, else a pseudo-file named after the model at the source root.
    """
    for diagnostic in diagnostics:
        location = as_location(diagnostic.location)
        if parts.is_file_location(location):
            return Location(location.file, location.line, location.function, location.code)
    caller = caller_location()
    if caller is not None:
        return caller
    name = clean_text(str(getattr(record, "model_name", "") or "model")).replace("/", "_").strip(". ") or "model"
    return Location(os.path.join(os.getcwd(), name), 1)


def _results(diagnostics: list[Diagnostic], bases: parts.UriBases, fallback: Location) -> list[sarif_om.Result]:
    results = []
    occurrences: Counter[str] = Counter()
    for diagnostic in diagnostics:
        location = as_location(diagnostic.location)
        physical = parts.physical_location(location, bases)
        uri = physical.artifact_location.uri if physical is not None else ""
        line_key, result_key = parts.fingerprint_parts(diagnostic, uri, location)
        if physical is None:
            physical = parts.physical_location(fallback, bases)
        line_hash = parts.digest(line_key)
        occurrences[line_hash] += 1
        properties = {k: parts.jsonable(v) for k, v in diagnostic.properties.items()}
        properties["ruleName"] = diagnostic.rule.name
        if not uri:
            properties["locationIsFallback"] = True
        if diagnostic.fields:
            properties["fields"] = parts.jsonable(dict(diagnostic.fields))
        results.append(sarif_om.Result(
            rule_id=diagnostic.rule.code, level=diagnostic.level.value,
            message=sarif_om.Message(text=_message_text(diagnostic.message)),
            locations=[sarif_om.Location(physical_location=physical,
                                         logical_locations=parts.logical_locations(diagnostic))],
            related_locations=_related(diagnostic, bases),
            code_flows=parts.code_flows(diagnostic, bases),
            partial_fingerprints={LINE_HASH: f"{line_hash}:{occurrences[line_hash]}",
                                  RESULT_HASH: parts.digest(result_key, 32)},
            properties=properties))
    return results


def _message_text(message: str) -> str:
    text = clean_text(message).strip() or "(no message)"
    return text if text[-1] in ".!?" else text + "."


def _related(diagnostic: Diagnostic, bases: parts.UriBases) -> list[sarif_om.Location] | None:
    related = []
    for index, location in enumerate(diagnostic.related):
        physical = parts.physical_location(location, bases)
        if physical is not None:
            related.append(sarif_om.Location(id=index, physical_location=physical,
                                             message=sarif_om.Message(text=clean_text(str(location)))))
    return related or None


def _rule_of(result: sarif_om.Result) -> Rule:
    return rules.CATALOG[result.rule_id]


def _descriptor(rule: Rule) -> sarif_om.ReportingDescriptor:
    return sarif_om.ReportingDescriptor(
        id=rule.code, name=_pascal(rule.name),
        short_description=sarif_om.MultiformatMessageString(text=_message_text(rule.name.replace("-", " "))),
        full_description=sarif_om.MultiformatMessageString(text=_message_text(rule.docs.what_it_does or rule.fix)),
        help=sarif_om.MultiformatMessageString(text=render_text(rule), markdown=render_markdown(rule, title=False)),
        help_uri=rule.help_uri,
        default_configuration=sarif_om.ReportingConfiguration(level=rule.level.value),
        properties={"tags": list(rule.tags), "precision": "high",
                    "problem.severity": {"error": "error", "warning": "warning", "note": "recommendation"}[
                        rule.level.value]})


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.replace("_", "-").split("-") if part)


# -- baseline -------------------------------------------------------------------------------------
def _apply_baseline(results: list[sarif_om.Result], baseline: Mapping[str, Any]) -> list[sarif_om.Result]:
    """Set baselineState on ``results``; return the baseline's results that are gone, as 'absent'."""
    previous: dict[str, list[Mapping[str, Any]]] = {}
    for run in baseline.get("runs", []) or []:
        for old in run.get("results", []) or []:
            key = (old.get("partialFingerprints") or {}).get(RESULT_HASH)
            if key and old.get("baselineState") != "absent":
                previous.setdefault(key, []).append(old)
    for result in results:
        matches = previous.get(result.partial_fingerprints[RESULT_HASH])
        if not matches:
            result.baseline_state = "new"
            continue
        old = matches.pop(0)
        same = (old.get("message") or {}).get("text") == result.message.text
        result.baseline_state = "unchanged" if same else "updated"
    absent = []
    for leftovers in previous.values():
        for old in leftovers:
            if old.get("ruleId") not in rules.CATALOG:
                continue
            absent.append(sarif_om.Result(
                rule_id=old["ruleId"], level=old.get("level", rules.CATALOG[old["ruleId"]].level.value),
                message=sarif_om.Message(text=_message_text(str((old.get("message") or {}).get("text", "")))),
                locations=old.get("locations"), partial_fingerprints=old.get("partialFingerprints"),
                baseline_state="absent", properties=old.get("properties")))
    return absent


# -- invocation and run properties ----------------------------------------------------------------
def _notification(item: Notification | Diagnostic, bases: parts.UriBases) -> sarif_om.Notification:
    if isinstance(item, Diagnostic):
        return sarif_om.Notification(message=sarif_om.Message(text=_message_text(item.message)), level="error",
                                     descriptor=sarif_om.ReportingDescriptorReference(id=item.rule.code))
    if isinstance(item, BaseException):
        frames = [sarif_om.StackFrame(location=sarif_om.Location(
            physical_location=parts.physical_location(f, bases),
            message=sarif_om.Message(text=clean_text(f.function or "<module>"))))
            for f in traceback_frames(item)[-parts.MAX_STACK_FRAMES:]]
        exception = sarif_om.Exception(kind=type(item).__name__, message=clean_text(str(item))[:2000],
                                       stack=sarif_om.Stack(frames=frames) if frames else None)
        text = f"{type(item).__name__}: {item}"
        return sarif_om.Notification(message=sarif_om.Message(text=_message_text(text[:2000])), level="error",
                                     exception=exception)
    if isinstance(item, Mapping):
        level = str(item.get("level", "error"))
        return sarif_om.Notification(message=sarif_om.Message(text=_message_text(str(item.get("message", "")))),
                                     level=level if level in ("error", "warning", "note", "none") else "error")
    return sarif_om.Notification(message=sarif_om.Message(text=_message_text(str(item))), level="error")


def _record_properties(record: Any) -> dict[str, Any] | None:
    if record is None:
        return None
    try:
        data = record.to_dict() if hasattr(record, "to_dict") else dict(vars(record))
    except Exception:  # noqa: BLE001 - a broken record must not break the log
        return {"record": parts.jsonable(repr(record))}
    return {"record": parts.jsonable(data)}


def _metrics(diagnostics: list[Diagnostic]) -> dict[str, Any]:
    levels = Counter(d.level.value for d in diagnostics)
    return {"results": len(diagnostics), "errors": levels["error"], "warnings": levels["warning"],
            "notes": levels["note"], "byRule": dict(sorted(Counter(d.rule.code for d in diagnostics).items()))}


def _merge_bases(incoming: Mapping[str, Any], merged: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Add ``incoming`` base ids to ``merged``; returns renames for ids that clash with another folder."""
    renames: dict[str, str] = {}
    for base_id, location in incoming.items():
        uri = (location or {}).get("uri")
        existing = next((k for k, v in merged.items() if v.get("uri") == uri), None)
        if existing is not None:
            if existing != base_id:
                renames[base_id] = existing
            continue
        new_id = base_id
        while new_id in merged:
            new_id = f"{base_id}_{len(merged)}"
        merged[new_id] = dict(location or {})
        if new_id != base_id:
            renames[base_id] = new_id
    return renames


def _rename_bases(node: Any, renames: Mapping[str, str]) -> None:
    if not renames:
        return
    if isinstance(node, dict):
        if node.get("uriBaseId") in renames:
            node["uriBaseId"] = renames[node["uriBaseId"]]
        for value in node.values():
            _rename_bases(value, renames)
    elif isinstance(node, list):
        for value in node:
            _rename_bases(value, renames)
