"""Regressions against a baseline run, and SARIF ``baselineState`` on every result.

A change is a fact about one model between two runs: it newly fails, newly
passes, its accuracy got worse beyond a factor, its export got slower beyond
a factor, it is new or it went missing. Regressions (the first, third and
fourth kinds) also become ZOO004 diagnostics on the model's record.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, Location
from onnxsight.reports.sarif import RESULT_HASH  # machine- and line-independent result hash
from onnxsight.zoo._result import PASSED, ModelResult, as_float

NEWLY_FAILING, NEWLY_PASSING = "newly-failing", "newly-passing"
ACCURACY_WORSE, SLOWER = "accuracy-worse", "slower"
NEW_MODEL, MISSING = "new-model", "missing"
REGRESSIONS = frozenset({NEWLY_FAILING, ACCURACY_WORSE, SLOWER})


@dataclass(frozen=True)
class RegressionPolicy:
    """When a difference counts as a regression.

    ``accuracy_factor``: max abs error grew by more than this factor (errors
    below ``accuracy_floor`` count as the floor, so 0 -> 1e-9 is not a
    regression). ``time_factor``: export time grew by more than this factor,
    ignoring exports faster than ``time_floor_seconds`` in both runs.
    """

    accuracy_factor: float = 10.0
    accuracy_floor: float = 1e-6
    time_factor: float = 2.0
    time_floor_seconds: float = 1.0


def auto_baseline(store: Any, run_id: str) -> str | None:
    """``--baseline auto``: the latest earlier run over the same suites (in any order) that recorded results.

    Never a run of other suites: against a run of ``smoke`` every ``transformers``
    model would be new and every smoke model missing, which says nothing. With no
    such run there is no baseline (and ``--fail-on new-errors`` counts every failure).
    """
    current = store.run_info(run_id)
    if current is None:
        return None
    wanted = _suite_set(current["suites"])
    runs = store.runs()
    earlier = runs[(runs["models"] > 0) & (runs["run_id"] != run_id) & (runs["started"] <= current["started"])]
    same = earlier[earlier["suites"].map(lambda suites: _suite_set(suites) == wanted).astype(bool)]
    return None if same.empty else str(same.iloc[-1]["run_id"])


def _suite_set(suites: Any) -> frozenset[str]:
    return frozenset(part.strip() for part in str(suites or "").split(",") if part.strip())


def _change(model: str, kind: str, detail: str, **values: Any) -> dict[str, Any]:
    return {"model": model, "kind": kind, "detail": detail, "regression": kind in REGRESSIONS, **values}


def _model_changes(now: ModelResult, then: ModelResult, policy: RegressionPolicy) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    if then.status == PASSED and now.status != PASSED:
        changes.append(_change(now.name, NEWLY_FAILING, f"was passed, now {now.status} (stage {now.stage})",
                               before=then.status, after=now.status))
    elif then.status != PASSED and now.status == PASSED:
        changes.append(_change(now.name, NEWLY_PASSING, f"was {then.status}, now passed",
                               before=then.status, after=now.status))
    err_now, err_then = as_float(now.max_abs_diff), as_float(then.max_abs_diff)
    if err_now is not None and err_then is not None and err_now > policy.accuracy_factor * max(err_then,
                                                                                                 policy.accuracy_floor):
        changes.append(_change(now.name, ACCURACY_WORSE, f"max abs diff {err_now:.3g} (baseline {err_then:.3g}, "
                               f"more than {policy.accuracy_factor:g}x)", before=then.max_abs_diff, after=now.max_abs_diff))
    t_now, t_then = now.export_seconds, then.export_seconds
    if (t_now is not None and t_then is not None and max(t_now, t_then) >= policy.time_floor_seconds
            and t_now > policy.time_factor * t_then):
        changes.append(_change(now.name, SLOWER, f"export took {t_now:.2f}s (baseline {t_then:.2f}s, more than "
                               f"{policy.time_factor:g}x)", before=t_then, after=t_now))
    return changes


def compare(current: Sequence[ModelResult], baseline: Sequence[ModelResult] | None,
            policy: RegressionPolicy | None = None) -> list[dict[str, Any]]:
    """Changes from ``baseline`` to ``current``; sets ``changes`` and adds ZOO004 diagnostics on ``current``."""
    if baseline is None:
        return []
    policy = policy or RegressionPolicy()
    before = {r.name: r for r in baseline}
    now_names = {r.name for r in current}
    changes: list[dict[str, Any]] = []
    for result in current:
        then = before.get(result.name)
        found = ([_change(result.name, NEW_MODEL, f"not in the baseline; {result.status}", after=result.status)]
                 if then is None else _model_changes(result, then, policy))
        result.changes = found
        _add_regression_diagnostics(result, found)
        changes.extend(found)
    changes.extend(_change(name, MISSING, f"in the baseline ({r.status}) but not in this run", before=r.status)
                   for name, r in before.items() if name not in now_names and r.suite in {c.suite for c in current})
    return changes


def _add_regression_diagnostics(result: ModelResult, changes: Iterable[dict[str, Any]]) -> None:
    source = result.source or {}
    location = Location(source["file"], source.get("line")) if source.get("file") else None
    ctx = DiagnosticContext()
    for change in changes:
        if change["regression"]:
            ctx.emit(rules.ZOO_REGRESSION, location=location, model=result.name, detail=change["detail"],
                     properties={"change": change["kind"]})
    result.diagnostics = [d for d in result.diagnostics if d.get("rule") != rules.ZOO_REGRESSION.code]
    result.diagnostics.extend(d.to_dict() for d in ctx.diagnostics)


# -- SARIF baselineState --------------------------------------------------------------------------


def _key(result: dict[str, Any]) -> tuple:
    props = result.get("properties") or {}
    fingerprint = (result.get("partialFingerprints") or {}).get(RESULT_HASH)
    if fingerprint:
        return props.get("model"), result.get("ruleId"), fingerprint
    locations = result.get("locations") or [{}]
    physical = locations[0].get("physicalLocation") or {}
    uri = (physical.get("artifactLocation") or {}).get("uri")
    line = (physical.get("region") or {}).get("startLine")
    return (props.get("model"), result.get("ruleId"), uri, line, props.get("fx_node"), props.get("onnx_node"),
            props.get("change"))


def _message(result: dict[str, Any]) -> str:
    return str((result.get("message") or {}).get("text", ""))


def apply_baseline_state(log: dict[str, Any], baseline: dict[str, Any] | None,
                         models: Iterable[str] | None = None) -> dict[str, Any]:
    """Set ``baselineState`` on every result of ``log`` (a merged SARIF dict), in place.

    Results are matched on (model, rule, location, FX/ONNX node): unmatched
    ones are ``new``, matched ones ``unchanged`` or ``updated`` (message
    changed); baseline results of the models in ``models`` that no longer
    appear are added with ``absent``. Without a baseline every result is ``new``.
    """
    old: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for run in (baseline or {}).get("runs", []):
        for result in run.get("results", []):
            if result.get("baselineState") != "absent":  # the baseline's own leftovers are not results
                old[_key(result)].append(result)
    for run in log.get("runs", []):
        for result in run.get("results", []):
            matches = old.get(_key(result))
            if not matches:
                result["baselineState"] = "new"
                continue
            previous = matches.pop(0)
            result["baselineState"] = "unchanged" if _message(previous) == _message(result) else "updated"
    if baseline is None or not log.get("runs"):
        return log
    keep = set(models) if models is not None else None
    target = log["runs"][0]
    rule_ids = [rule.get("id") for rule in target.setdefault("tool", {}).setdefault("driver", {}).setdefault(
        "rules", [])]
    old_rules = {rule.get("id"): rule for run in baseline.get("runs", [])
                 for rule in ((run.get("tool") or {}).get("driver") or {}).get("rules", [])}
    for leftovers in old.values():
        for previous in leftovers:
            if keep is not None and (previous.get("properties") or {}).get("model") not in keep:
                continue
            absent = copy.deepcopy(previous)
            absent["baselineState"] = "absent"
            rule_id = absent.get("ruleId")
            if rule_id not in rule_ids and rule_id in old_rules:
                target["tool"]["driver"]["rules"].append(copy.deepcopy(old_rules[rule_id]))
                rule_ids.append(rule_id)
            absent.pop("ruleIndex", None)
            if rule_id in rule_ids:
                absent["ruleIndex"] = rule_ids.index(rule_id)
            target.setdefault("results", []).append(absent)
    return log
