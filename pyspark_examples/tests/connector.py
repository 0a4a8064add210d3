"""Where Spark's Kafka connector comes from in the tests, or why it is missing.

`format("kafka")` lives outside pyspark's wheel, in Maven artifacts: spark-sql-kafka-0-10 and
spark-token-provider-kafka-0-10 (of exactly the Spark version in use) plus commons-pool2 and
kafka-clients. No PyPI, Debian or npm package carries the first two, and Maven is not reachable
from this project's machines, so the end-to-end tests take the connector from, in this order:

- KBROKER_SPARK_KAFKA_JARS: a directory holding the jars (e.g. copied from a machine where
  `spark-submit --packages` ran, out of ~/.ivy2*/jars). kafka-clients may be left out: the
  sha256-pinned kafka-clients 3.9.1 that compat_tests fetches from PyPI is used instead; so may
  commons-pool2 where Debian's libcommons-pool2-java is installed.
- KBROKER_SPARK_PACKAGES=1: let Spark resolve the Maven coordinates itself (spark.jars.packages).
- `../shared/spark-kafka-jars` beside the project (where CI's clone finds its test inputs), when
  that directory exists; the same rules as for KBROKER_SPARK_KAFKA_JARS.

Without any, those tests skip and say so; except in CI (CI set), where a missing connector fails
them, as a missing ZooKeeper, pyspark or Java does: CI must not pass by not running them. A
variable that is set but wrong, or a default directory that is there but wrong, is an error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

JARS_ENV = "KBROKER_SPARK_KAFKA_JARS"
PACKAGES_ENV = "KBROKER_SPARK_PACKAGES"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The connector jars among the test inputs beside the project (../shared/spark-kafka-jars).
DEFAULT_JARS_DIR = PROJECT_ROOT.parent / "shared" / "spark-kafka-jars"
SCALA_BINARY = "2.13"  # every pyspark 4.x is built for Scala 2.13

# Debian's libcommons-pool2-java (2.11.1 in bookworm; Spark 4 is built with 2.12, same API).
DEBIAN_COMMONS_POOL2 = Path("/usr/share/java/commons-pool2.jar")

CONNECTOR = f"spark-sql-kafka-0-10_{SCALA_BINARY}"
TOKEN_PROVIDER = f"spark-token-provider-kafka-0-10_{SCALA_BINARY}"


class ConnectorError(RuntimeError):
    """KBROKER_SPARK_KAFKA_JARS is set but does not hold a usable connector."""


@dataclass
class Connector:
    """What to give the SparkSession (`spark.jars` or `spark.jars.packages`), or why nothing can be."""

    jars: list[Path] = field(default_factory=list)
    packages: str | None = None
    missing_reason: str | None = None

    @property
    def available(self) -> bool:
        return self.missing_reason is None

    def spark_conf(self) -> dict[str, str]:
        if self.packages:
            return {"spark.jars.packages": self.packages}
        if self.jars:
            return {"spark.jars": ",".join(str(jar) for jar in self.jars)}
        return {}


def maven_coordinates(spark_version: str) -> str:
    return f"org.apache.spark:{CONNECTOR}:{spark_version}"


def _versions(directory: Path, artifact: str) -> dict[str, Path]:
    found = {}
    for jar in directory.glob(f"{artifact}-*.jar"):
        # Not the -sources / -javadoc / -tests jars a Maven cache may hold beside the classes.
        match = re.fullmatch(rf"{re.escape(artifact)}-(\d[\w.\-]*?)\.jar", jar.name)
        if match and not re.search(r"-(sources|javadoc|tests)$", match.group(1)):
            found[match.group(1)] = jar
    return found


def jars_from_directory(directory: Path, spark_version: str,
                        fallback_kafka_clients: Callable[[], Path] | None,
                        fallback_commons_pool2: Path | None = DEBIAN_COMMONS_POOL2) -> list[Path]:
    """The jars to put on Spark's classpath from `directory`; ConnectorError naming what is wrong."""
    if not directory.is_dir():
        raise ConnectorError(f"{JARS_ENV}={directory} is not a directory")
    jars = []
    for artifact in (CONNECTOR, TOKEN_PROVIDER):
        versions = _versions(directory, artifact)
        if spark_version in versions:
            jars.append(versions[spark_version])
        elif versions:
            # The connector uses Spark internals: one built for another Spark fails in odd ways.
            raise ConnectorError(
                f"{directory} holds {artifact} {', '.join(sorted(versions))} but pyspark is {spark_version}: "
                f"the connector's version must be Spark's"
            )
        else:
            raise ConnectorError(f"{directory} has no {artifact}-{spark_version}.jar")
    pools = _versions(directory, "commons-pool2")
    if pools:
        jars.append(pools[max(pools, key=_version_key)])
    elif fallback_commons_pool2 is not None and fallback_commons_pool2.is_file():
        jars.append(fallback_commons_pool2)
    else:
        raise ConnectorError(f"{directory} has no commons-pool2-*.jar (the connector pools its consumers with it)")
    clients = _versions(directory, "kafka-clients")
    if clients:
        jars.append(clients[max(clients, key=_version_key)])
    elif fallback_kafka_clients is not None:
        jars.append(fallback_kafka_clients())
    else:
        raise ConnectorError(f"{directory} has no kafka-clients-*.jar")
    return jars


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def find_connector(spark_version: str, fallback_kafka_clients: Callable[[], Path] | None = None,
                   environ: Mapping[str, str] | None = None, default_directory: Path = DEFAULT_JARS_DIR) -> Connector:
    env = os.environ if environ is None else environ
    directory = env.get(JARS_ENV)
    if directory:
        return Connector(jars=jars_from_directory(Path(directory), spark_version, fallback_kafka_clients))
    if env.get(PACKAGES_ENV, "").strip().lower() in ("1", "true", "yes"):
        return Connector(packages=maven_coordinates(spark_version))
    if default_directory.is_dir():
        return Connector(jars=jars_from_directory(default_directory, spark_version, fallback_kafka_clients))
    return Connector(missing_reason=(
        f"Spark's Kafka connector ({CONNECTOR}-{spark_version}.jar, {TOKEN_PROVIDER}-{spark_version}.jar, "
        f"commons-pool2) comes from Maven, which is not reachable here and is in no PyPI package, and "
        f"{default_directory} does not exist: set {JARS_ENV} to a directory holding those jars, or "
        f"{PACKAGES_ENV}=1 where Spark can reach Maven (see pyspark_examples/README.md)"
    ))


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """CI sets CI (scripts/test.sh there provides everything the Spark tests need)."""
    return bool((os.environ if environ is None else environ).get("CI"))


def require_connector(connector: Connector, environ: Mapping[str, str] | None = None) -> None:
    """Return when the connector is available; otherwise skip, saying why, or in CI fail: there a
    missing connector must not let the end-to-end tests pass by not running."""
    if connector.available:
        return
    if in_ci(environ):
        pytest.fail(f"CI must run the Spark end-to-end tests: {connector.missing_reason}")
    pytest.skip(connector.missing_reason)
