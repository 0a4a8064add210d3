"""Where the broker spends its time: py-spy samples of the broker process during a benchmark.

py-spy reads the process's memory from outside (ptrace), so the broker runs unmodified. The
samples are kept in py-spy's collapsed-stack format ("frame;frame;... count", one stack a line;
any flame graph tool reads it) and summarised here by function (self and total time) and by
area of the code.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

# Leaf frames are attributed to an area by their file, first match wins.
AREAS = [
    ("sendfile / socket writes", re.compile(r"sendfile|sock_send|_sock_write|selector_events.*write|writelines")),
    ("event loop (asyncio)", re.compile(r"asyncio/|selectors\.py")),
    ("protocol decode/encode", re.compile(r"protocol/|construct/")),
    ("storage (log, segments, indexes)", re.compile(r"kbroker/storage/")),
    ("request handlers", re.compile(r"kbroker/handlers/")),
    ("connection handling", re.compile(r"kbroker/server/")),
    ("cluster services", re.compile(r"kbroker/cluster/|kbroker/coordinator/")),
]
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def py_spy() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


class Recorder:
    """`py-spy record` attached to a pid until stop() (or `seconds` pass)."""

    def __init__(self, pid: int, output: Path, seconds: float, rate: int = 200) -> None:
        binary = py_spy()
        if binary is None:
            raise FileNotFoundError("py-spy is not installed (pip install 'kbroker[bench]')")
        self.output = output
        self.proc = subprocess.Popen(
            [binary, "record", "--pid", str(pid), "--format", "raw", "--function", "--nonblocking",
             "--rate", str(rate), "--duration", str(max(1, round(seconds))), "--output", str(output)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )

    def wait(self, timeout_s: float = 120) -> Path:
        out, _ = self.proc.communicate(timeout=timeout_s)
        if self.proc.returncode != 0 or not self.output.exists():
            raise RuntimeError(f"py-spy failed ({self.proc.returncode}): {out.strip()[-500:]}")
        return self.output


def summarize(collapsed: Path, top: int = 20) -> dict[str, Any]:
    """Self and total shares per function, and self share per area of the code."""
    self_samples: Counter[str] = Counter()
    total_samples: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    samples = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = [_short(frame) for frame in stack.split(";")]
        # The first frame may be a thread name ("process 123:..."); py-spy puts it first when asked.
        self_samples[frames[-1]] += count
        for frame in set(frames):
            total_samples[frame] += count
        areas[_area(stack.split(";")[-1])] += count
    if samples == 0:
        return {"samples": 0, "self": [], "total": [], "areas": []}

    def shares(counter: Counter[str], n: int) -> list[dict[str, Any]]:
        return [{"function": f, "share": round(c / samples, 4)} for f, c in counter.most_common(n)]

    return {"samples": samples, "self": shares(self_samples, top), "total": shares(total_samples, top),
            "areas": [{"area": a, "share": round(c / samples, 4)} for a, c in areas.most_common()]}


def _short(frame: str) -> str:
    """`func (path/to/kbroker/storage/log.py:12)` -> `func (kbroker/storage/log.py:12)`."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    path = "/" + match.group("file")  # py-spy gives paths under the working directory relative
    for anchor in ("/kbroker/", "/protocol/", "/asyncio/", "/construct/"):
        if anchor in path:
            path = path[path.rindex(anchor) + 1:]
            break
    else:
        path = Path(path).name
    line = match.group("line")
    return f"{match.group('func')} ({path}{':' + line if line else ''})"


def _area(frame: str) -> str:
    for name, pattern in AREAS:
        if pattern.search(frame):
            return name
    return "other Python / C calls"
