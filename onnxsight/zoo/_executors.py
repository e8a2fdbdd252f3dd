"""Executors: where model tasks run. A local thread pool of supervisors by default, Ray optionally.

Both run each model in its own supervised process (``_supervise``); they
differ only in where that supervisor runs. ``on_result`` is always called on
the calling thread, so the runner can write to its store without locks.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from onnxsight.zoo._result import CRASHED, ModelResult
from onnxsight.zoo._supervise import supervise

logger = logging.getLogger("onnxsight.zoo")

ResultCallback = Callable[[ModelResult], None]
StartCallback = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Limits:
    timeout: float
    memory_limit_mb: float | None = None


class Executor(Protocol):
    def run(self, tasks: Sequence[dict[str, Any]], limits: Limits, *, on_start: StartCallback,
            on_result: ResultCallback) -> None:
        """Run every task, reporting each result; on KeyboardInterrupt stop the model processes and re-raise."""


class LocalExecutor:
    """``jobs`` supervisor threads on this machine, each running one model process at a time."""

    def __init__(self, jobs: int = 1) -> None:
        self.jobs = max(1, jobs)

    def run(self, tasks: Sequence[dict[str, Any]], limits: Limits, *, on_start: StartCallback,
            on_result: ResultCallback) -> None:
        stop = threading.Event()

        def one(task: dict[str, Any]) -> ModelResult | None:
            if stop.is_set():
                return None
            on_start(task)
            return supervise(task, timeout=limits.timeout, memory_limit_mb=limits.memory_limit_mb, stop=stop)

        pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="onnxsight-zoo")
        pending: set[Future] = {pool.submit(one, task) for task in tasks}
        try:
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    result = future.result()
                    if result is not None:
                        on_result(result)
        except BaseException:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            for future in pending:  # models that finished while stopping are kept
                if future.done() and not future.cancelled() and future.exception() is None and future.result():
                    on_result(future.result())
            raise
        pool.shutdown(wait=True)


def _ray_task(task: dict[str, Any], timeout: float, memory_limit_mb: float | None) -> dict[str, Any]:
    """Runs on a Ray worker: supervise the model process there and send the record back by value."""
    stop = threading.Event()
    try:
        result = supervise(task, timeout=timeout, memory_limit_mb=memory_limit_mb, stop=stop)
    except KeyboardInterrupt:  # ray.cancel: stop the model process before leaving
        stop.set()
        raise
    return result.to_dict() if result is not None else {}


class RayExecutor:
    """Tasks on a Ray cluster (``address``) or on a local Ray started for the job.

    GPU models (tag ``gpu`` or a CUDA provider) ask Ray for one GPU, so they
    land on GPU workers. Records come back by value; ONNX files stay in the
    model folders, which on a multi-node cluster should be a shared filesystem.
    """

    def __init__(self, jobs: int = 1, address: str | None = None) -> None:
        self.jobs = max(1, jobs)
        self.address = address

    def run(self, tasks: Sequence[dict[str, Any]], limits: Limits, *, on_start: StartCallback,
            on_result: ResultCallback) -> None:
        try:
            import ray
        except ImportError as exc:
            raise RuntimeError("--executor ray needs Ray: pip install 'onnxsight[ray]'") from exc
        started = not ray.is_initialized()
        if started:
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if self.address:
                ray.init(address=self.address, **options)
            else:
                ray.init(num_cpus=self.jobs, **options)
        try:
            have_gpus = ray.cluster_resources().get("GPU", 0) > 0
            remote = ray.remote(max_retries=0)(_ray_task)
            pending: dict[Any, dict[str, Any]] = {}
            for task in tasks:
                gpus = 1 if task.get("gpu") and have_gpus else 0
                if task.get("gpu") and not have_gpus:
                    logger.warning("model %s wants a GPU but the Ray cluster has none; running it on CPU", task["model"])
                ref = remote.options(num_cpus=1, num_gpus=gpus).remote(task, limits.timeout, limits.memory_limit_mb)
                pending[ref] = task
                on_start(task)
            self._collect(ray, pending, on_result)
        finally:
            if started:
                ray.shutdown()

    @staticmethod
    def _collect(ray: Any, pending: dict[Any, dict[str, Any]], on_result: ResultCallback) -> None:
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                for ref in ready:
                    task = pending.pop(ref)
                    try:
                        data = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001  (the Ray worker itself died)
                        data = ModelResult(name=task["model"], suite=task.get("suite_name", ""), status=CRASHED,
                                           tags=list(task.get("tags", [])), source=task.get("source", {}),
                                           error=f"Ray task failed: {type(exc).__name__}: {exc}"[:2000]).to_dict()
                    if data:
                        on_result(ModelResult.from_dict(data))
        except BaseException:
            for ref in pending:
                ray.cancel(ref)  # not forced: the task's supervisor kills its model process
            raise


def make_executor(kind: str, *, jobs: int, ray_address: str | None = None) -> Executor:
    if kind == "local":
        return LocalExecutor(jobs)
    if kind == "ray":
        return RayExecutor(jobs, ray_address)
    raise ValueError(f"unknown executor {kind!r}; choose local or ray")
