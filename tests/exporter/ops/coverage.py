"""Op coverage over the whole OpInfo database: `python -m tests.exporter.ops.coverage [--out FILE]`.

An op counts as passing when at least one sample ran and every sample that
torch.export could capture exported, ran in ONNX Runtime and matched eager.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys

from tests.exporter.ops.opinfo_harness import check_op, opinfo_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="op-coverage.json")
    parser.add_argument("--limit", type=int, default=3)
    parser.add_argument("--filter", default="")
    options = parser.parse_args(argv)
    table = {k: v for k, v in opinfo_table().items() if options.filter in k}
    results: dict[str, dict] = {}
    for index, name in enumerate(sorted(table)):
        try:
            samples = check_op(name, limit=options.limit)
        except Exception as exc:  # noqa: BLE001 - a harness failure is that op's failure
            results[name] = {"status": "error", "detail": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        statuses = collections.Counter(s.status for s in samples)
        tried = [s for s in samples if s.status not in ("skipped", "capture")]
        if not tried:
            status = "not-attempted"
        elif all(s.status == "passed" for s in tried):
            status = "passed"
        else:
            status = "failed"
        first = next((s for s in tried if s.status != "passed"), None)
        results[name] = {"status": status, "samples": dict(statuses), "detail": first.detail if first else ""}
        print(f"[{index + 1}/{len(table)}] {name}: {status}", file=sys.stderr, flush=True)
    attempted = [r for r in results.values() if r["status"] in ("passed", "failed", "error")]
    passed = [r for r in attempted if r["status"] == "passed"]
    summary = {"attempted": len(attempted), "passed": len(passed),
               "coverage": round(len(passed) / max(1, len(attempted)), 4), "ops": results}
    with open(options.out, "w") as handle:
        json.dump(summary, handle, indent=1, sort_keys=True)
    print(f"op coverage: {len(passed)} / {len(attempted)} OpInfo ops pass ({summary['coverage']:.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
