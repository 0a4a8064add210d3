"""protocol/messages must be exactly what scripts/generate_protocol.py makes of the specs.

The specs are Kafka's JSON files in ../shared/kafka-protocol beside the clone (never copied into
the repository). Where they are missing the check skips, except in CI (CI=true), which always has
them: there a missing spec directory fails, so a stale protocol/messages cannot pass unchecked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = ROOT.parent / "shared" / "kafka-protocol"
GENERATOR = ROOT / "scripts" / "generate_protocol.py"
MESSAGES = ROOT / "protocol" / "messages"



def require_specs(spec_dir: Path = SPEC_DIR, env: os._Environ[str] | dict[str, str] = os.environ) -> None:
    """Skip where Kafka's specs are missing; fail instead in CI, which must run the check."""
    if spec_dir.is_dir():
        return
    reason = f"Kafka's JSON specs not found at {spec_dir}"
    if env.get("CI", "").lower() == "true":
        pytest.fail(f"CI must check protocol/messages against the specs: {reason}")
    pytest.skip(reason)


@pytest.fixture
def specs() -> Path:
    require_specs()
    return SPEC_DIR


def run_generator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATOR), *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_generated_modules_are_up_to_date(specs: Path) -> None:
    result = run_generator("--check", str(specs), str(MESSAGES))
    assert result.returncode == 0, f"protocol/messages is stale; run {GENERATOR.name}:\n{result.stderr}"


def test_check_mode_detects_a_difference(specs: Path) -> None:
    """The check above can fail: an edited or extra module is reported."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        assert run_generator(str(specs), str(out)).returncode == 0
        generated = sorted(p.name for p in out.glob("*.py"))
        assert generated == sorted(p.name for p in MESSAGES.glob("*.py"))
        assert run_generator("--check", str(specs), str(out)).returncode == 0
        target = out / "metadata.py"
        target.write_text(target.read_text() + "# edited\n")
        (out / "stray.py").write_text("")
        result = run_generator("--check", str(specs), str(out))
    assert result.returncode == 1
    assert "metadata.py" in result.stderr and "stray.py" in result.stderr


def test_missing_specs_fail_in_ci_and_skip_elsewhere(tmp_path: Path) -> None:
    missing = tmp_path / "no-specs"
    with pytest.raises(pytest.fail.Exception, match="CI must check"):
        require_specs(missing, {"CI": "true"})
    with pytest.raises(pytest.skip.Exception):
        require_specs(missing, {})
    require_specs(tmp_path, {"CI": "true"})  # present: nothing to say
