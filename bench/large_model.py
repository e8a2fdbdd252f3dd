"""Large-model benchmark: a model with more than 2 GB of weights, exported, saved and verified per node.

Export: in fresh processes, the peak RSS of export + save above the model's own
footprint (imports warmed up on a tiny model first) for onnxsight and for
torch.onnx.export(dynamo=True) with its defaults (optimize=True), each saved
embedded and with external data: onnxsight streams weights from the model's
tensors into the file (the data file, or the embedded model's bytes), and checks
the weight-free structure, so it should need no second copy. ``--export-gb``
takes several sizes (below 2 GB the default save embeds the weights).

Verification: per-node verification of the program (``onnxsight.verify``) and
of its saved file (``onnxsight.verify_onnx``, CPU against CPU), against one
plain ONNX Runtime run of the same file (session from the path, one run).
Each measurement is a fresh process; the peak resident set of the measured
call alone is read from the kernel (``VmHWM`` after resetting it through
``/proc/self/clear_refs``, once imports and a tiny warm-up verification are
done), so the model's construction and export do not count. The first round
is an untimed warm-up (page cache, lazy imports); then ``--runs`` rounds,
interleaved, reported as median and min-max.

    python bench/large_model.py [--gb 2.2] [--runs 5] [--skip-export] [--skip-verify]
    python bench/large_model.py --export-gb 0.3 1.5 --skip-verify    # below 2 GB: embedded vs external
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_floor import spread  # noqa: E402

WIDTH = 8192


def _build(gb: float):
    import torch

    torch.manual_seed(0)
    layers = max(1, round(gb * 1024**3 / (WIDTH * WIDTH * 4)))
    return torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers)]).eval()


_EXPORTERS = {   # tool -> (exporter, save's external_data)
    "onnxsight": ("onnxsight", None), "onnxsight-embedded": ("onnxsight", False),
    "onnxsight-external": ("onnxsight", True),
    "torch.onnx-embedded": ("torch.onnx", False), "torch.onnx": ("torch.onnx", True),
}


def _export_once(exporter: str, model, x, out: str, external) -> None:
    import torch

    if exporter == "onnxsight":
        import onnxsight

        onnxsight.export(model, (x,)).save(out, external_data=external)   # None: external above 2 GB
    else:   # torch.onnx's defaults (optimize=True), as a user calls it
        torch.onnx.export(model, (x,), dynamo=True).save(out, external_data=bool(external))


def _child(tool: str, gb: float, out: str) -> dict:
    """Export + save in this fresh process; the peak RSS of that call alone (VmHWM reset after the warm-up)."""
    import torch

    exporter, external = _EXPORTERS[tool]
    _export_once(exporter, torch.nn.Linear(4, 4), torch.randn(1, 4), out + ".warm.onnx", external)  # imports
    model = _build(gb)
    weights_mb = sum(p.numel() * 4 for p in model.parameters()) / 1024**2
    x = torch.randn(1, WIDTH)
    base = _reset_peak()
    start = time.perf_counter()
    _export_once(exporter, model, x, out, external)
    seconds = time.perf_counter() - start
    peak = _status_mb("VmHWM:")
    folder = os.path.dirname(out)
    files = {f: os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if ".warm." not in f}
    return {"tool": tool, "weights_mb": round(weights_mb), "seconds": round(seconds, 2),
            "rss_before_mb": round(base), "peak_rss_mb": round(peak), "extra_mb": round(peak - base),
            "files_mb": {k: round(v / 1024**2) for k, v in files.items()}}


# -- verification -----------------------------------------------------------------------------------
def _status_mb(key: str) -> float:
    with open("/proc/self/status", encoding="ascii") as handle:
        return int(next(line for line in handle if line.startswith(key)).split()[1]) / 1024


def _reset_peak() -> float:
    """Reset the kernel's peak resident set (VmHWM) to the current RSS; return that RSS in MB."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")
    return _status_mb("VmRSS:")


def _warm_up() -> None:
    """Imports and ONNX Runtime's first session, on a tiny model, so they do not count."""
    import torch

    import onnxsight

    onnxsight.verify(onnxsight.export(torch.nn.Linear(4, 4), (torch.randn(1, 4),)))


def _verify_child(kind: str, gb: float, path: str) -> dict:
    """One measurement: ``ort`` (plain session + one run), ``verify`` (the program), ``verify_onnx`` (the file)."""
    import numpy as np

    record: dict = {"kind": kind}
    if kind == "ort":
        import onnxruntime as ort

        record["rss_before_mb"] = _reset_peak()
        start = time.perf_counter()
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        record["session_s"] = time.perf_counter() - start
        feeds = {session.get_inputs()[0].name: np.random.randn(1, WIDTH).astype(np.float32)}
        start = time.perf_counter()
        session.run(None, feeds)
        record["run_s"] = time.perf_counter() - start
        record["seconds"] = record["session_s"] + record["run_s"]
    else:
        import torch

        import onnxsight

        _warm_up()
        if kind == "verify":
            prog = onnxsight.export(_build(gb), (torch.randn(1, WIDTH),))
            x = torch.randn(1, WIDTH)
            with torch.no_grad():
                start = time.perf_counter()
                prog.exported_program.module()(x)
                record["torch_s"] = time.perf_counter() - start
            call = lambda: onnxsight.verify(prog)  # noqa: E731
        else:
            call = lambda: onnxsight.verify_onnx(path, target="CPUExecutionProvider")  # noqa: E731
        record["rss_before_mb"] = _reset_peak()
        start = time.perf_counter()
        result = call()
        record["seconds"] = time.perf_counter() - start
        record.update(passed=bool(result.passed), compared=len(result.nodes), sessions=result.info["sessions"])
    record["peak_rss_mb"] = _status_mb("VmHWM:")
    record["weights_mb"] = os.path.getsize(path + ".data") / 1024**2
    return record


def _run_child(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:160]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _verification(gb: float, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "large.onnx")
        saved = _run_child(["--gb", str(gb), "--child", "onnxsight-external", path])
        if "error" in saved:
            print(f"save failed: {saved['error']}")
            return
        kinds = ("ort", "verify", "verify_onnx")
        results: dict[str, list[dict]] = {k: [] for k in kinds}
        for round_ in range(runs + 1):          # round 0: untimed warm-up
            for kind in kinds:
                record = _run_child(["--gb", str(gb), "--verify-child", kind, path])
                if round_ and "error" not in record:
                    results[kind].append(record)
                elif "error" in record:
                    print(f"{kind} failed: {record['error']}")
        _print_verification(results, runs)


def _print_verification(results: dict[str, list[dict]], runs: int) -> None:
    ort = results["ort"]
    baseline = statistics.median([r["seconds"] for r in ort]) if ort else float("nan")
    weights = next((r["weights_mb"] for rs in results.values() for r in rs), float("nan"))
    print(f"\nVerification of a model with {weights:.0f} MB of weights; median (min-max) of {runs} fresh processes "
          "after one warm-up round.\n")
    print("| measured | seconds | x one ORT run | peak RSS MB | peak RSS / weights | growth MB | compared | passed |")
    print("|---|---|---|---|---|---|---|---|")
    names = {"ort": "ONNX Runtime: session from the path + one run", "verify": "onnxsight.verify(prog), per node",
             "verify_onnx": "onnxsight.verify_onnx(path), per node, CPU vs CPU"}
    for kind, records in results.items():
        seconds = [r["seconds"] for r in records]
        peaks = [r["peak_rss_mb"] for r in records]
        ratio = [p / r["weights_mb"] for p, r in zip(peaks, records)]
        relative = [s / baseline for s in seconds]
        growth = [p - r["rss_before_mb"] for p, r in zip(peaks, records)]   # above the RSS when the call began
        compared = records[0].get("compared", "-") if records else "-"
        passed = all(r.get("passed", True) for r in records) if records else "-"
        print(f"| {names[kind]} | {spread(seconds)} | {spread(relative)} | {spread(peaks, 0)} | "
              f"{spread(ratio)} | {spread(growth, 0)} | {compared} | {passed} |")
    if ort:
        print(f"\nONNX Runtime alone: session {spread([r['session_s'] for r in ort])} s, "
              f"run {spread([r['run_s'] for r in ort], 3)} s.")
    torch_s = [r["torch_s"] for r in results["verify"] if "torch_s" in r]
    if torch_s:
        print(f"PyTorch eager, one run of the same model: {spread(torch_s, 3)} s.")


def _export(sizes: list[float], runs: int, tools: list[str]) -> None:
    """Export + save, each tool in fresh processes, interleaved; round 0 is an untimed warm-up."""
    print(f"\nExport + save: peak RSS above the RSS before the call (the model built, imports warm), "
          f"median (min-max) of {runs} fresh processes after one warm-up round.\n")
    print("| weights MB | exporter | save | export+save s | extra over model MB | extra / weights |")
    print("|---|---|---|---|---|---|")
    for gb in sizes:
        # above 2 GB an embedded model cannot be written (protobuf's limit): external data only
        results: dict[str, list[dict]] = {tool: [] for tool in tools if gb < 1.95 or _EXPORTERS[tool][1] is not False}
        for round_ in range(runs + 1):
            for tool in results:
                with tempfile.TemporaryDirectory() as tmp:
                    r = _run_child(["--gb", str(gb), "--child", tool, os.path.join(tmp, "large.onnx")])
                if "error" in r:
                    print(f"| {gb} GB | {tool} | failed: {r['error'][:120]} | | | |")
                elif round_:
                    results[tool].append(r)
        for tool, records in results.items():
            if not records:
                continue
            external = _EXPORTERS[tool][1]
            save = "external data" if external else ("embedded" if external is False else "default (auto)")
            extra = [r["extra_mb"] for r in records]
            print(f"| {records[0]['weights_mb']} | {_EXPORTERS[tool][0]} | {save} | "
                  f"{spread([r['seconds'] for r in records])} | {spread(extra, 0)} | "
                  f"{spread([e / r['weights_mb'] for e, r in zip(extra, records)])} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=2.2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-export", action="store_true")
    parser.add_argument("--export-gb", type=float, nargs="+", default=None,
                        help="model sizes for the export table (default: --gb)")
    parser.add_argument("--tools", nargs="+", default=list(_EXPORTERS), choices=list(_EXPORTERS))
    parser.add_argument("--skip-verify", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--verify-child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(_child(options.child[0], options.gb, options.child[1])))
        return 0
    if options.verify_child:
        print(json.dumps(_verify_child(options.verify_child[0], options.gb, options.verify_child[1])))
        return 0
    if not options.skip_export:
        _export(options.export_gb or [options.gb], options.runs, options.tools)
    if not options.skip_verify:
        _verification(options.gb, options.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
