"""Acceptance: the README's start command and five-minute tour work as written."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.brokers import BrokerProcess, free_port

PROJECT = Path(__file__).resolve().parents[2]
README = (PROJECT / "README.md").read_text()


def tour_block(language: str) -> str:
    tour = README[README.index("## A five-minute tour"):]
    match = re.search(rf"```{language}\n(.*?)```", tour, re.DOTALL)
    assert match is not None, f"no {language} block in the tour"
    return match.group(1)


def readme_start_command() -> list[str]:
    match = re.search(r"\*\*Start a broker\*\*.*?```sh\n(.*?)\n```", README, re.DOTALL)
    assert match is not None
    return match.group(1).split()


def test_start_command_and_tour(tmp_path: Path) -> None:
    port = free_port()
    command = [str(PROJECT / part) if part.startswith("scripts/") else part for part in readme_start_command()]
    # The start script installs into .venv first: allow it the time pip needs.
    broker = BrokerProcess(tmp_path, port=port, start_command=command, start_timeout_s=300).start()
    try:
        env = {**os.environ, "PATH": f"{PROJECT / '.venv' / 'bin'}:{os.environ['PATH']}"}
        shell = tour_block("sh").replace("127.0.0.1:9092", f"127.0.0.1:{port}")
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", shell], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=240
        )
        assert result.returncode == 0, result.stderr
        for text in ("key web: GET /", "key db: slow query", "key web: POST /login", "key api: started"):
            assert text in result.stdout, f"{text!r} missing from the kcat output:\n{result.stdout}"
        assert "api\tstarted" in result.stdout  # the console consumer prints key<TAB>value, as Kafka does

        python = tour_block("python").replace("127.0.0.1:9092", f"127.0.0.1:{port}")
        result = subprocess.run(
            [str(PROJECT / ".venv" / "bin" / "python"), "-c", python], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        assert "b'py' b'hello from python'" in result.stdout
        assert result.stdout.count("\n") == 5, "every message of the tour is read back once"
    finally:
        broker.stop()
