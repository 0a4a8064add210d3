"""The broker keeps freed large buffers for the next ones (kbroker/malloc_tuning.py): a stream of
frames of a few MB, each read into a growing buffer and taken out whole as a follower reads fetch
answers, costs no page faults once the first ones are in. With glibc's defaults this very loop
took about 1.8 page faults per page it moved (each freed buffer went back to the kernel)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kbroker import malloc_tuning

PROBE = """
import random, resource, sys
from kbroker.malloc_tuning import keep_large_buffers
print(keep_large_buffers())
rng = random.Random(7)
sizes = [rng.randint(200_000, 6_000_000) for _ in range(200)]
source = b"x" * 6_000_000
buffer = bytearray()
buffer += source[:1]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for size in sizes:
    buffer += source[:size]
    frame = bytes(buffer[:size])
    del buffer[:size]
    del frame
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, sum(sizes) // 4096)
"""


@pytest.mark.skipif(not malloc_tuning._is_glibc(), reason="the tuning is glibc's mallopt")
def test_large_buffers_are_reused_without_page_faults() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True).stdout
    applied, counts = out.splitlines()
    faults, pages = map(int, counts.split())
    assert applied == "True"
    assert faults < pages // 10, f"{faults} page faults for {pages} pages moved"


def test_an_operators_malloc_settings_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert malloc_tuning.keep_large_buffers() is False
