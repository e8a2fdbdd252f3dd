"""Benchmark: per-node verification of every intermediate value, onnxsight vs torch.onnx.

Models: a 12-block transformer-style network (attention + MLP blocks) and a
ResNet-50-shaped conv net built by hand (torchvision is not required).
For each model, in the same run, each case in its own process (clean peak memory):

- ``torch + ORT``: one eager PyTorch run plus one ONNX Runtime session and run of the exported model;
- ``onnxsight``: ``onnxsight.verify(prog)`` (propagated and isolated modes, every intermediate value);
- ``float64``: ``onnxsight.verify(prog, reference="float64")``: propagated, judged against a float64 run
  of the program within PyTorch's own float32 rounding error (the noise floor);
- ``torch.onnx``: ``torch.onnx.verification.verify_onnx_program(p, compare_intermediates=True)``.

Memory is the peak resident-set growth during the timed section (sampled every 2 ms).

    .venv/bin/python bench/verify.py                 # both models, markdown table
    .venv/bin/python bench/verify.py --models transformer --skip-torch-onnx
    .venv/bin/python bench/verify.py --cases torch+ort,propagated,float64 --repeat 5   # the float64 mode's cost
    python bench/verify.py --device cuda --repeat 5   # PyTorch on CUDA, ONNX Runtime's CUDAExecutionProvider

``--device cuda`` runs every side on the GPU: eager and onnxsight's reference on ``cuda``, the ONNX model
in ONNX Runtime's CUDAExecutionProvider, and torch.onnx's verification on a model exported on CUDA (it
picks CUDAExecutionProvider itself where ONNX Runtime has it). Memory is still the host's peak RSS.

``--repeat N`` runs each verify case once untimed (warm-up), then N times: the time is the
median, with the fastest and slowest run beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import ResNet50, Transformer  # noqa: E402  (bench/ is not a package)


# -- models ---------------------------------------------------------------------------------------
def _randomise_bn(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "transformer": lambda: (Transformer().eval(), (torch.randn(1, 128, 256),)),
    "resnet50": lambda: (_randomise_bn(ResNet50()), (torch.randn(1, 3, 224, 224),)),  # non-trivial BN statistics
}


# -- measurement ----------------------------------------------------------------------------------
class PeakRSS:
    """Peak resident-set growth over a ``with`` block, sampled on a thread."""

    def __init__(self, interval: float = 0.002) -> None:
        import psutil

        self.process = psutil.Process()
        self.interval = interval
        self.peak = self.start = 0
        self._stop = threading.Event()

    def __enter__(self) -> "PeakRSS":
        self.start = self.peak = self.process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(self.interval)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.start) / 1024**2


def _child(model_name: str, case: str, budget_mb: int | None, repeat: int = 1, device: str = "cpu") -> dict[str, Any]:
    """Run one case in this process and return its measurements."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("onnxsight").setLevel(logging.CRITICAL)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    import onnxruntime  # noqa: F401 - imported outside every timed section alike
    import onnxsight.verification  # noqa: F401

    torch.manual_seed(0)
    model, args = MODELS[model_name]()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    info: dict[str, Any] = {"model": model_name, "case": case, "device": device}
    providers = ("CUDAExecutionProvider",) if device == "cuda" else ("CPUExecutionProvider",)
    if case == "torch.onnx":
        import torch.onnx.verification as onnx_verification

        model, args = model.to(device), tuple(a.to(device) for a in args)
        program = torch.onnx.export(model, args, dynamo=True, verbose=False)
        with PeakRSS() as rss:
            start = time.perf_counter()
            infos = onnx_verification.verify_onnx_program(program, compare_intermediates=True)
            info["seconds"] = time.perf_counter() - start
        info["values"] = len(infos)
    else:
        import onnxsight

        prog = onnxsight.export(model, args)
        info["onnx_nodes"] = len(prog.model_proto.graph.node)
        if case == "torch+ort":
            import onnxruntime as ort

            model, on_device = model.to(device), tuple(a.to(device) for a in args)
            with PeakRSS() as rss, torch.no_grad():
                start = time.perf_counter()
                model(*on_device)
                if device == "cuda":
                    torch.cuda.synchronize()
                info["torch_seconds"] = time.perf_counter() - start
                start = time.perf_counter()
                session = ort.InferenceSession(prog.model_proto.SerializeToString(), providers=list(providers))
                session.run(None, {prog.input_names[0]: args[0].numpy()})
                info["ort_seconds"] = time.perf_counter() - start
            info["seconds"] = info["torch_seconds"] + info["ort_seconds"]
        else:
            mode = "isolated" if case.startswith("isolated") else "propagated"
            budget = (budget_mb or 256) * 1024**2
            options = {"mode": mode, "memory_budget": budget, "reference": "float64" if case == "float64" else None,
                       "providers": providers, "torch_device": device}
            if repeat > 1:
                onnxsight.verify(prog, **options)  # warm-up
            times = []
            with PeakRSS() as rss:
                for _ in range(repeat):
                    start = time.perf_counter()
                    result = onnxsight.verify(prog, **options)
                    times.append(time.perf_counter() - start)
            info["seconds"] = statistics.median(times)
            if repeat > 1:
                info.update(runs=len(times), fastest=min(times), slowest=max(times))
            info.update(values=len(result.nodes), passed=result.passed, sessions=result.info["sessions"],
                        budget_mb=budget // 1024**2, provider=result.info["providers"][0])
    info["peak_mb"] = rss.growth_mb
    return info


def _run_case(model: str, case: str, budget_mb: int | None = None, repeat: int = 1,
              device: str = "cpu") -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", model, case, str(budget_mb or 0), str(repeat), device]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"model": model, "case": case, "error": (done.stderr or done.stdout)[-800:]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="transformer,resnet50")
    parser.add_argument("--skip-torch-onnx", action="store_true")
    parser.add_argument("--small-budget-mb", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1,
                        help="verify cases: one warm-up run, then this many timed runs (median, fastest, slowest)")
    parser.add_argument("--cases", default="torch+ort,propagated,isolated,float64,small-budget,torch.onnx",
                        help="comma-separated subset of the cases to run")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="cuda: PyTorch on the GPU and ONNX Runtime's CUDAExecutionProvider on every side")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        budget = int(options.child[2]) or None
        print(json.dumps(_child(options.child[0], options.child[1], budget, int(options.child[3]), options.child[4])))
        return
    rows = []
    for model in options.models.split(","):
        wanted = options.cases.split(",")
        cases = [(c, None) for c in ("torch+ort", "propagated", "isolated", "float64") if c in wanted]
        if "small-budget" in wanted:
            cases.append(("propagated", options.small_budget_mb))
        if "torch.onnx" in wanted and not options.skip_torch_onnx:
            cases.append(("torch.onnx", None))
        for case, budget in cases:  # each row as it comes: a run stopped by a deadline keeps what it measured
            rows.append(_run_case(model, case, budget, options.repeat, options.device))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(_table(rows))


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | case | values | sessions | wall time (s) | peak RSS growth (MB) | vs torch.onnx | "
             "vs torch + ORT |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        base = next((r for r in mine if r["case"] == "torch+ort" and "seconds" in r), None)
        ref = next((r for r in mine if r["case"] == "torch.onnx" and "seconds" in r), None)
        for r in mine:
            if "error" in r:
                lines.append(f"| {model} | {r['case']} | error: {r['error'].splitlines()[-1][:80]} |||||||")
                continue
            case = r["case"] + (f" (budget {r['budget_mb']} MB)" if "budget_mb" in r else "")
            if "runs" in r:
                case += f" (median of {r['runs']}: {r['fastest']:.2f}-{r['slowest']:.2f} s)"
            if r["case"] == "torch+ort":
                case += f" ({r['torch_seconds']:.2f} + {r['ort_seconds']:.2f} s)"
            speedup = f"{ref['seconds'] / r['seconds']:.1f}x faster" if ref and r not in (ref, base) else ""
            versus = f"{r['seconds'] / base['seconds']:.2f}x" if base and r is not base else ""
            lines.append(f"| {model} | {case} | {r.get('values', '')} | {r.get('sessions', '')} | "
                         f"{r['seconds']:.2f} | {r['peak_mb']:.0f} | {speedup} | {versus} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
