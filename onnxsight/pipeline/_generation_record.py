"""The run record of a verified generation, and its reports (markdown, HTML, SARIF, the record itself).

The record is the one-call record (``build_run_record``) of the step that diverged, its per-node
comparison as ``verification``, plus ``generation``: the steps, the verdict and the root causes with
the lines GEN001 named, so that ``onnxsight report`` renders it again without the model.
"""

from __future__ import annotations

import os
from typing import Any

from onnxsight.pipeline._run_record import build_run_record
from onnxsight.reports import RunRecord, jsonable, write_reports


def generation_summary(result: Any) -> dict[str, Any]:
    """What the reports show of a :class:`~onnxsight.verification.GenerationResult`."""
    data = result.to_dict()
    tolerance = result.info.get("tolerance") or {}
    logits_dtype = "float32"
    atol = (tolerance.get("dtypes") or {}).get(logits_dtype, [None])[0]
    roots = [{k: row.get(k) for k in ("value", "fx_node", "target", "onnx_op", "max_abs_diff", "shape_mismatch",
                                      "file", "line")} for row in data["root_causes"]]
    for row in roots:
        if not isinstance(row["file"], str) or row["file"] == "nan":
            row["file"] = row["line"] = None
    diverged = next((d for d in result.diagnostics if d.code == "GEN001" and d.location is not None
                     and d.properties.get("onnx_value")), None)
    if roots and diverged is not None and roots[0]["file"] is None:  # the model's own line, as GEN001 names it
        roots[0]["file"], roots[0]["line"] = diverged.location.file, diverged.location.line
    steps = [{k: row.get(k) for k in ("step", "phase", "new_tokens", "past_length", "torch_tokens", "onnx_tokens",
                                      "tokens_agree", "max_logit_diff", "max_cache_diff", "worst_cache", "margin",
                                      "near_tie", "divergence", "error")} for row in data["steps"]]
    return jsonable({
        "passed": data["passed"], "requested_steps": data["requested_steps"], "steps_agreed": data["steps_agreed"],
        "first_divergence": data["first_divergence"], "first_token_difference": data["first_token_difference"],
        "encoder": data["encoder"], "atol": atol, "steps": steps, "root_causes": roots,
        "providers": data["info"].get("providers"), "batch": data["info"].get("batch"),
        "prompt_length": data["info"].get("prompt_length"), "seconds": data["info"].get("seconds"),
        "programs": sorted((data["info"].get("programs") or {})),
    })


def build_generation_record(model: Any, result: Any) -> RunRecord:
    """The run record of a verified generation (kind ``generation``)."""
    programs = result.programs
    decoder = getattr(programs, "decoder", None) if programs is not None else None
    program = decoder if hasattr(decoder, "exported_program") else None
    run = build_run_record(record=getattr(program, "record", None), diagnostics=result.diagnostics,
                           program=program, verification=result.verification, kind="generation",
                           model_name=type(model).__name__)
    run.generation = generation_summary(result)
    run.status = "ok" if result.passed else "verification failed"
    return run


def write_generation_reports(model: Any, result: Any, artifacts_dir: str | os.PathLike) -> list[str]:
    """Markdown, HTML, SARIF and the run record of ``result`` in ``artifacts_dir``; their paths."""
    run = build_generation_record(model, result)
    return write_reports(run, os.fspath(artifacts_dir), diagnostics=result.diagnostics)
