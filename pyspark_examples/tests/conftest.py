"""One local SparkSession for every Spark test of the run, with Spark's Kafka connector on its
classpath when one is available (see connector.py).

One session, because a JVM's classpath is fixed when pyspark starts it: the connector's jars must be
there from the first session on, and starting Spark costs ~10 s that need not be paid per module.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pyspark_examples.tests.connector import Connector, find_connector, in_ci, require_connector

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def require_spark() -> str:
    """pyspark's version, or a skip where pyspark or Java is missing; except in CI, whose
    scripts/test.sh installs both: there a missing one fails rather than letting these tests pass
    by not running."""
    problem = None
    try:
        import pyspark
    except ImportError:
        problem = "pyspark is not installed (scripts/setup.sh spark installs it)"
    else:
        if shutil.which("java") is None:
            problem = "Spark needs java (JDK 17+)"
    if problem:
        if in_ci():
            pytest.fail(f"CI must run the Spark tests: {problem}")
        # allow_module_level: test modules call this before importing the examples, which import pyspark.
        pytest.skip(problem, allow_module_level=True)
    return pyspark.__version__


def pinned_kafka_clients() -> Path:
    """compat_tests' kafka-clients 3.9.1 (sha256-pinned, from PyPI), the version Spark 4.x is built with."""
    from compat_tests.java_deps import LIB_DIR, ensure_jars

    ensure_jars()
    return LIB_DIR / "kafka-clients.jar"


@pytest.fixture(scope="session")
def spark_connector() -> Connector:
    return find_connector(require_spark(), fallback_kafka_clients=pinned_kafka_clients)


@pytest.fixture(scope="session")
def spark(spark_connector: Connector, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    from pyspark.sql import SparkSession

    # Python workers (if any step needs one) run this interpreter, not whatever `python3` is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    scratch = tmp_path_factory.mktemp("spark")
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # One task per stage and one state store per stateful operator: the data is tiny, and each
        # shuffle partition of a streaming aggregation costs a state store and its files per batch.
        "spark.sql.shuffle.partitions": "1",
        "spark.default.parallelism": "1",
        "spark.sql.session.timeZone": "UTC",
        # Loopback only, whatever the host name resolves to.
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.local.dir": str(scratch / "local"),
        "spark.sql.warehouse.dir": str(scratch / "warehouse"),
        **spark_connector.spark_conf(),
    }
    builder = SparkSession.builder.master("local[1]").appName("kbroker-spark-tests")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_spark(spark_connector: Connector, request: pytest.FixtureRequest) -> SparkSession:
    """The session, for tests that use format("kafka"). Without the connector they skip, saying why
    (before starting Spark, when nothing else needs it), or fail in CI."""
    require_connector(spark_connector)
    return request.getfixturevalue("spark")
