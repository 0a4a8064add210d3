"""Progress while a benchmark runs: rich when installed (the `bench` extra), plain lines otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Step(Protocol):
    def update(self, count: int) -> None: ...


class UI:
    """Plain output: one line when a step starts, one when it ends."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet

    def log(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    @contextmanager
    def step(self, description: str, seconds: float | None = None) -> Iterator[Step]:
        self.log(f"… {description}")
        yield _NoStep()

    def close(self) -> None:
        pass


class _NoStep:
    def update(self, count: int) -> None:
        pass


class RichUI(UI):
    """A live bar per run (time-based when its duration is known) with the message count."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), console=self.console, transient=True,
        )
        self.progress.start()

    def log(self, text: str) -> None:
        self.progress.console.print(text, highlight=False, soft_wrap=True)

    @contextmanager
    def step(self, description: str, seconds: float | None = None) -> Iterator[Step]:
        task = self.progress.add_task(description, total=seconds, info="")
        step = _RichStep(self.progress, task, seconds)
        try:
            yield step
        finally:
            self.progress.remove_task(task)

    def close(self) -> None:
        self.progress.stop()


class _RichStep:
    def __init__(self, progress: Any, task: Any, seconds: float | None) -> None:
        self.progress = progress
        self.task = task
        self.seconds = seconds
        self.started = time.monotonic()

    def update(self, count: int) -> None:
        fields: dict[str, Any] = {"info": f"{count:,} msgs"}
        if self.seconds:
            fields["completed"] = min(self.seconds, time.monotonic() - self.started)
        self.progress.update(self.task, **fields)


def make_ui(quiet: bool = False) -> UI:
    if not quiet:
        try:
            return RichUI()
        except ImportError:
            pass
    return UI(quiet)
