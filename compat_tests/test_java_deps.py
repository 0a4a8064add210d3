"""The jar fetcher's checks, without network or Java: pins are enforced, cached jars reused."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from compat_tests import java_deps


def fake_wheel(path: Path, jars: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in jars.items():
            wheel.writestr(java_deps.WHEEL_JAR_DIR + name, data)
    return path


def test_extract_checks_every_jar_against_its_pin(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "w.whl", {"a.jar": b"good", "b.jar": b"tampered"})
    lib = tmp_path / "lib"
    lib.mkdir()
    pins = {"a.jar": hashlib.sha256(b"good").hexdigest(), "b.jar": hashlib.sha256(b"original").hexdigest()}
    java_deps.extract_jars(wheel, ["a.jar"], tmp_path, lib, pins)
    assert (lib / "a.jar").read_bytes() == b"good"

    with pytest.raises(java_deps.JavaDepsError, match=r"b\.jar in w\.whl has sha256 [0-9a-f]{64}, expected "):
        java_deps.extract_jars(wheel, ["b.jar"], tmp_path, lib, pins)
    assert not (lib / "b.jar").exists(), "a jar that fails its pin is never put in place"

    with pytest.raises(java_deps.JavaDepsError, match="has no pyflink/lib/c.jar"):
        java_deps.extract_jars(wheel, ["c.jar"], tmp_path, lib, {"c.jar": "0" * 64})


def test_cached_jars_are_reused_and_wrong_ones_refetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    monkeypatch.setattr(java_deps, "LIB_DIR", lib)
    monkeypatch.setattr(java_deps, "JARS", {"a.jar": hashlib.sha256(b"a").hexdigest(),
                                            "b.jar": hashlib.sha256(b"b").hexdigest()})
    fetched: list[list[str]] = []
    monkeypatch.setattr(java_deps, "_fetch", lambda names, quiet: fetched.append(names))
    (lib / "a.jar").write_bytes(b"a")
    (lib / "b.jar").write_bytes(b"b")
    assert java_deps.ensure_jars() == [lib / "a.jar", lib / "b.jar"]
    assert fetched == [], "everything cached: no download"

    (lib / "b.jar").write_bytes(b"corrupted")
    java_deps.ensure_jars()
    assert fetched == [["b.jar"]]
