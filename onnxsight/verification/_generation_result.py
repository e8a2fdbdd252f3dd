"""GenerationResult: a verified generation, step by step; GenerationPrograms: the step programs it runs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pandas as pd

from onnxsight.diagnostics import Diagnostic
from onnxsight.rules import Level

STEP_COLUMNS = (
    "step", "phase", "new_tokens", "past_length", "torch_tokens", "onnx_tokens", "tokens_agree",
    "max_logit_diff", "logits_passed", "max_cache_diff", "worst_cache", "cache_passed",
    "margin", "near_tie", "divergence", "error",
)
# divergence: None (the step agrees), "near-tie" (a token differs at a near-tie: not a defect), or a real
# divergence: "logits", "cache", "tokens", "error" (ONNX Runtime failed)
REAL = ("error", "logits", "cache", "tokens")


@dataclass
class GenerationPrograms:
    """The ONNX programs of a generation: ``decoder`` (the step over the cache), and for an encoder-decoder
    ``encoder`` and ``first_step`` (the decoder's step without a cache, which computes the cross-attention
    cache). Each is an :class:`onnxsight.ONNXProgram`, the path of an ``.onnx`` file or an ``onnx.ModelProto``.
    """

    decoder: Any
    encoder: Any = None
    first_step: Any = None

    def items(self) -> list[tuple[str, Any]]:
        """(name, program) of the programs given, in the order the loop runs them."""
        return [(name, value) for name, value in (("encoder", self.encoder), ("first_step", self.first_step),
                                                  ("decoder", self.decoder)) if value is not None]

    def save(self, directory: str | os.PathLike, **options: Any) -> dict[str, str]:
        """Write every program as ``<directory>/<name>.onnx`` (``options`` go to ``ONNXProgram.save``)."""
        os.makedirs(directory, exist_ok=True)
        paths = {}
        for name, program in self.items():
            path = os.path.join(os.fspath(directory), f"{name}.onnx")
            if hasattr(program, "save"):
                program.save(path, **options)
            else:
                import onnx

                onnx.save(program if isinstance(program, onnx.ModelProto) else onnx.load(program), path)
            paths[name] = path
        return paths


class GenerationResult:
    """The outcome of :func:`onnxsight.verify_generation`.

    ``steps``: one row per step (``STEP_COLUMNS``): the tokens each side picks, the largest logit and cache
    differences, PyTorch's own top-1/top-2 margin and whether that is a near-tie, and the step's
    ``divergence``. ``first_token_difference``: the first step whose top-1 token differs, with whether it is
    a near-tie. ``first_divergence``: the first real divergence (not a near-tie). ``verification``: the
    per-node :class:`~onnxsight.VerificationResult` of that step, fed PyTorch's own cache;
    ``root_causes`` its first divergences with the user's lines. ``passed``: every step ran and agreed.
    """

    def __init__(self, steps: Sequence[Mapping[str, Any]], diagnostics: Sequence[Diagnostic], *,
                 requested: int, info: Mapping[str, Any] | None = None, encoder: Mapping[str, Any] | None = None,
                 verification: Any = None, step_inputs: Mapping[str, Any] | None = None,
                 programs: GenerationPrograms | None = None) -> None:
        self.steps: pd.DataFrame = pd.DataFrame([{k: row.get(k) for k in STEP_COLUMNS} for row in steps],
                                                columns=list(STEP_COLUMNS))
        for column in ("divergence", "error", "worst_cache"):  # None where nothing differs, not NaN
            self.steps[column] = self.steps[column].astype(object).where(self.steps[column].notna(), None)
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        self.requested = requested
        self.info: dict[str, Any] = dict(info or {})
        self.encoder: dict[str, Any] | None = dict(encoder) if encoder is not None else None
        self.verification = verification
        self.step_inputs: dict[str, Any] = dict(step_inputs or {})  # the diverging step's inputs, PyTorch's cache
        self.programs = programs
        self.report_paths: list[str] = []  # verify_generation(report=True): markdown, HTML, SARIF, the run record

    @property
    def tokens(self) -> list[list[int]]:
        """PyTorch's greedy tokens, one list per row of the batch."""
        return _columns(self.steps["torch_tokens"])

    @property
    def onnx_tokens(self) -> list[list[int]]:
        """The tokens ONNX Runtime picks at each step (fed PyTorch's token after a difference)."""
        return _columns(self.steps["onnx_tokens"])

    @property
    def first_token_difference(self) -> dict[str, Any] | None:
        """The first step whose top-1 token differs: ``{"step", "near_tie"}``; None when every token agrees."""
        differ = self.steps[~self.steps["tokens_agree"].fillna(True).astype(bool)]
        if differ.empty:
            return None
        row = differ.iloc[0]
        return {"step": int(row["step"]), "near_tie": row["divergence"] == "near-tie"}

    @property
    def first_divergence(self) -> dict[str, Any] | None:
        """The first real divergence: ``{"step", "kind", "phase"}`` (the encoder's is step -1); None when none."""
        if self.encoder is not None and not self.encoder.get("passed", True):
            return {"step": -1, "kind": "encoder", "phase": "encoder"}
        real = self.steps[self.steps["divergence"].isin(REAL)]
        if real.empty:
            return None
        row = real.iloc[0]
        return {"step": int(row["step"]), "kind": str(row["divergence"]), "phase": str(row["phase"])}

    @property
    def root_causes(self) -> pd.DataFrame:
        """The per-node root causes of the first real divergence (empty without one)."""
        if self.verification is None:
            from onnxsight.verification._result import NODE_COLUMNS

            return pd.DataFrame(columns=list(NODE_COLUMNS))
        return self.verification.root_causes

    @property
    def steps_agreed(self) -> int:
        """How many steps ran without a real divergence before the first one (all of them when none)."""
        first = self.first_divergence
        return len(self.steps) if first is None else max(first["step"], 0)

    @property
    def passed(self) -> bool:
        """True when every requested step ran, no step diverged (a near-tie does not), and no error was found."""
        if len(self.steps) != self.requested or self.first_divergence is not None:
            return False
        return not any(d.level is Level.ERROR for d in self.diagnostics)

    def __bool__(self) -> bool:
        return self.passed

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (NaN as strings), the per-node comparison of the diverging step included."""
        from onnxsight.verification._result import _jsonable

        return {
            "passed": self.passed, "requested_steps": self.requested, "steps_agreed": self.steps_agreed,
            "first_token_difference": self.first_token_difference, "first_divergence": self.first_divergence,
            "encoder": _jsonable(self.encoder) if self.encoder is not None else None,
            "steps": [{k: _jsonable(v) for k, v in row.items()} for row in self.steps.to_dict("records")],
            "root_causes": [{k: _jsonable(v) for k, v in row.items()} for row in self.root_causes.to_dict("records")],
            "verification": self.verification.to_dict() if self.verification is not None else None,
            "info": {k: _jsonable(v) for k, v in self.info.items()},
            "diagnostics": [d.to_dict() for d in self.diagnostics],
        }

    def to_json(self, path: str | os.PathLike | None = None, *, indent: int | None = 2) -> str:
        from onnxsight.verification._result import dump_json

        return dump_json(self.to_dict(), path, indent=indent)

    def __repr__(self) -> str:
        first = self.first_divergence
        where = "none" if first is None else f"step {first['step']} ({first['kind']})"
        roots = ", ".join(self.root_causes["value"]) or "none"
        return (f"GenerationResult(passed={self.passed}, steps={len(self.steps)}/{self.requested}, "
                f"steps_agreed={self.steps_agreed}, first_divergence={where}, root_causes=[{roots}])")


def _columns(series: pd.Series) -> list[list[int]]:
    rows = [list(v) for v in series if isinstance(v, (list, tuple))]
    return [list(tokens) for tokens in zip(*rows)] if rows else []
