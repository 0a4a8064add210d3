"""Fetch the Java Kafka client and its runtime jars, and compile the test harness.

There is no Maven repository on the machines this project runs on, only PyPI, Debian and
npm. kafka-clients 3.9.1 reaches us inside a PyPI wheel that bundles Apache Flink's jars
(`shigawire-apache-flink-libraries`). The same wheel carries everything the client needs
at run time (slf4j-api, lz4-java, snappy-java, zstd-jni), so one 92 MB download covers it;
pyspark's wheel (400+ MB) would only add the same four jars again.

Every jar is pinned by sha256: a re-published wheel with other contents fails loudly here
instead of quietly testing another client. Everything lands in `.cache/java/` (gitignored)
and is reused while the hashes match, so running this again costs nothing.

Run `python -m compat_tests.java_deps` to fetch (and compile, when javac exists); it prints
the classpath.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = PROJECT_ROOT / ".cache" / "java"
LIB_DIR = CACHE_DIR / "lib"
CLASSES_DIR = CACHE_DIR / "classes"
JAVA_DIR = Path(__file__).resolve().parent / "java"
HARNESS_SOURCE = JAVA_DIR / "KafkaHarness.java"
HARNESS_CLASS = "KafkaHarness"

WHEEL_REQUIREMENT = "shigawire-apache-flink-libraries==2.0.0.post1"
WHEEL_JAR_DIR = "pyflink/lib/"

# jar name inside the wheel -> sha256. Versions are those kafka-clients 3.9.1 is built against.
JARS: dict[str, str] = {
    "kafka-clients.jar": "7568b998572d256f0b7bc0afdc1b7a2588b8b08415c62ce314c864a6851ae9d9",  # 3.9.1
    "slf4j-api.jar": "d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0",  # 1.7.36
    "lz4-java.jar": "d74a3334fb35195009b338a951f918203d6bbca3d1d359033dc33edd1cadc9ef",  # 1.8.0
    "snappy-java.jar": "4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36",  # 1.1.10.7
    "zstd-jni.jar": "793ca8734aa15687e7e64564eab8b6ae9ee2720eae27aa663074682144b1c386",  # 1.5.6-4
}


class JavaDepsError(RuntimeError):
    """The jars could not be fetched or are not the pinned ones."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _cached_ok(name: str) -> bool:
    path = LIB_DIR / name
    return path.is_file() and sha256_of(path) == JARS[name]


def ensure_jars(quiet: bool = True) -> list[Path]:
    """The pinned jars, downloading and extracting the wheel only when one is missing or wrong."""
    missing = [name for name in JARS if not _cached_ok(name)]
    if missing:
        _fetch(missing, quiet)
    return [LIB_DIR / name for name in JARS]


def _fetch(names: list[str], quiet: bool) -> None:
    LIB_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR, prefix="download-") as tmp:
        wheel = _download_wheel(Path(tmp), quiet)
        extract_jars(wheel, names, Path(tmp), LIB_DIR)


def _download_wheel(dest: Path, quiet: bool) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--progress-bar", "off", "--dest", str(dest), WHEEL_REQUIREMENT,
    ]
    if quiet:
        command.append("-q")
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise JavaDepsError(f"pip download {WHEEL_REQUIREMENT} failed:\n{result.stdout}{result.stderr}")
    wheels = list(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise JavaDepsError(f"expected one wheel from pip download, got {wheels}")
    return wheels[0]


def extract_jars(wheel_path: Path, names: list[str], staging: Path, lib_dir: Path,
                 pins: dict[str, str] | None = None) -> None:
    """Copy `names` out of the wheel's jar directory into lib_dir, each checked against its pin."""
    pins = JARS if pins is None else pins
    with zipfile.ZipFile(wheel_path) as wheel:
        for name in names:
            member = WHEEL_JAR_DIR + name
            try:
                info = wheel.getinfo(member)
            except KeyError:
                raise JavaDepsError(f"{wheel_path.name} has no {member}") from None
            staged = staging / name
            with wheel.open(info) as src, staged.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            actual = sha256_of(staged)
            if actual != pins[name]:
                staged.unlink()
                raise JavaDepsError(
                    f"{member} in {wheel_path.name} has sha256 {actual}, expected {pins[name]}: "
                    "the wheel's contents changed; refusing to use it (update the pin in "
                    "compat_tests/java_deps.py only after checking the new jar)"
                )
            # Rename into place so a concurrent or interrupted run never sees half a jar.
            os.replace(staged, lib_dir / name)


def classpath(jars: list[Path]) -> str:
    return os.pathsep.join(str(jar) for jar in jars)


def java_tools() -> tuple[str, str] | None:
    """(java, javac), or None when the JDK is not installed."""
    java, javac = shutil.which("java"), shutil.which("javac")
    return (java, javac) if java and javac else None


def harness_sources() -> list[Path]:
    """KafkaHarness.java and the scenario files beside it (e.g. ViewScenarios.java, which adds
    scenarios to the harness and serves them through its loop), compiled together."""
    return sorted(JAVA_DIR.glob("*.java"))


def compile_harness(jars: list[Path], javac: str) -> Path:
    """Compile the harness sources once per source set (and jar set); returns the classes directory."""
    sources = harness_sources()
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    for name in sorted(JARS):
        digest.update(JARS[name].encode())
    out = CLASSES_DIR / digest.hexdigest()[:16]
    if (out / f"{HARNESS_CLASS}.class").is_file():
        return out
    CLASSES_DIR.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=CLASSES_DIR, prefix="build-"))
    try:
        result = subprocess.run(
            [javac, "-nowarn", "-encoding", "UTF-8", "--release", "17", "-cp", classpath(jars), "-d", str(staging),
             *(str(source) for source in sources)],
            capture_output=True, text=True,
        )
        if result.returncode != 0:
            raise JavaDepsError(f"javac failed:\n{result.stdout}{result.stderr}")
        try:
            staging.rename(out)
        except OSError:
            # Another run compiled the same source meanwhile; its output is identical.
            if not (out / f"{HARNESS_CLASS}.class").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def main() -> int:
    try:
        jars = ensure_jars(quiet=False)
        tools = java_tools()
        if tools is None:
            print("java/javac not found: jars fetched, harness not compiled", file=sys.stderr)
            print(classpath(jars))
            return 0
        classes = compile_harness(jars, tools[1])
    except JavaDepsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(classpath([classes, *jars]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
