"""The progress line: counts of passed / failed / crashed and the models running now."""

from __future__ import annotations

import sys
import threading
from typing import Any, TextIO

from onnxsight.zoo._result import ABNORMAL, PASSED, ModelResult

BAR_WIDTH = 24


class Progress:
    """Redraws one line on a terminal; prints one line per finished model elsewhere (CI logs)."""

    def __init__(self, total: int, *, done: int = 0, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total, self.done = total, done
        self.counts = {"passed": 0, "failed": 0, "crashed": 0}
        self.running: list[str] = []
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self._lock = threading.Lock()

    def count(self, result: ModelResult) -> None:
        key = "passed" if result.status == PASSED else "crashed" if result.status in ABNORMAL else "failed"
        self.counts[key] += 1

    def start(self, task: dict[str, Any]) -> None:
        with self._lock:
            self.running.append(task["model"])
            self._draw()

    def finish(self, result: ModelResult) -> None:
        with self._lock:
            self.done += 1
            self.count(result)
            if result.name in self.running:
                self.running.remove(result.name)
            if self.enabled and not self.tty:
                detail = f" ({result.error.splitlines()[0][:120]})" if result.error else ""
                self.stream.write(f"[{self.done}/{self.total}] {result.name}: {result.status} at {result.stage}, "
                                  f"{result.seconds:.1f}s{detail}\n")
                self.stream.flush()
            self._draw()

    def line(self) -> str:
        filled = int(BAR_WIDTH * self.done / self.total) if self.total else BAR_WIDTH
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        running = ", ".join(self.running[:3]) + (" ..." if len(self.running) > 3 else "")
        c = self.counts
        return (f"[{bar}] {self.done}/{self.total}  passed {c['passed']}  failed {c['failed']}  "
                f"crashed {c['crashed']}" + (f"  | running: {running}" if running else ""))

    def _draw(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.line()[:200])
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
