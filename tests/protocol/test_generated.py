"""protocol/messages must be exactly what scripts/generate_protocol.py makes of the specs."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = ROOT.parent / "shared" / "kafka-protocol"
GENERATOR = ROOT / "scripts" / "generate_protocol.py"
MESSAGES = ROOT / "protocol" / "messages"

pytestmark = pytest.mark.skipif(not SPEC_DIR.is_dir(), reason=f"Kafka's JSON specs not found at {SPEC_DIR}")


def run_generator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATOR), *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_generated_modules_are_up_to_date() -> None:
    result = run_generator("--check", str(SPEC_DIR), str(MESSAGES))
    assert result.returncode == 0, f"protocol/messages is stale; run {GENERATOR.name}:\n{result.stderr}"


def test_check_mode_detects_a_difference() -> None:
    """The check above can fail: an edited or extra module is reported."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        assert run_generator(str(SPEC_DIR), str(out)).returncode == 0
        generated = sorted(p.name for p in out.glob("*.py"))
        assert generated == sorted(p.name for p in MESSAGES.glob("*.py"))
        assert run_generator("--check", str(SPEC_DIR), str(out)).returncode == 0
        target = out / "metadata.py"
        target.write_text(target.read_text() + "# edited\n")
        (out / "stray.py").write_text("")
        result = run_generator("--check", str(SPEC_DIR), str(out))
    assert result.returncode == 1
    assert "metadata.py" in result.stderr and "stray.py" in result.stderr
