"""Finding Spark's Kafka connector for the end-to-end tests, and what its absence means (a skip, or in
CI a failure): without Spark, Java or a network."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_examples.tests.connector import (
    DEFAULT_JARS_DIR,
    JARS_ENV,
    PACKAGES_ENV,
    PROJECT_ROOT,
    Connector,
    ConnectorError,
    find_connector,
    jars_from_directory,
    require_connector,
)

VERSION = "4.1.4"


def jar_dir(tmp_path: Path, *names: str) -> Path:
    directory = tmp_path / "jars"
    directory.mkdir()
    for name in names:
        (directory / name).write_bytes(b"PK")
    return directory


COMPLETE = (
    f"spark-sql-kafka-0-10_2.13-{VERSION}.jar",
    f"spark-sql-kafka-0-10_2.13-{VERSION}-sources.jar",
    f"spark-token-provider-kafka-0-10_2.13-{VERSION}.jar",
    "commons-pool2-2.11.1.jar",
    "commons-pool2-2.12.0.jar",
)


def test_a_directory_with_the_connector(tmp_path: Path) -> None:
    directory = jar_dir(tmp_path, *COMPLETE, "kafka-clients-3.9.1.jar", "unrelated.jar")
    assert [p.name for p in jars_from_directory(directory, VERSION, None)] == [
        f"spark-sql-kafka-0-10_2.13-{VERSION}.jar",
        f"spark-token-provider-kafka-0-10_2.13-{VERSION}.jar",
        "commons-pool2-2.12.0.jar",
        "kafka-clients-3.9.1.jar",
    ]


def test_kafka_clients_falls_back_to_the_pinned_one(tmp_path: Path) -> None:
    directory = jar_dir(tmp_path, *COMPLETE)
    pinned = tmp_path / "kafka-clients.jar"
    assert jars_from_directory(directory, VERSION, lambda: pinned)[-1] == pinned
    with pytest.raises(ConnectorError, match="no kafka-clients"):
        jars_from_directory(directory, VERSION, None)


@pytest.mark.parametrize(("names", "message"), [
    ((f"spark-token-provider-kafka-0-10_2.13-{VERSION}.jar", "commons-pool2-2.12.0.jar"),
     f"no spark-sql-kafka-0-10_2.13-{VERSION}.jar"),
    (("spark-sql-kafka-0-10_2.13-4.0.1.jar", f"spark-token-provider-kafka-0-10_2.13-{VERSION}.jar",
      "commons-pool2-2.12.0.jar"),
     f"holds spark-sql-kafka-0-10_2.13 4.0.1 but pyspark is {VERSION}"),
    ((f"spark-sql-kafka-0-10_2.13-{VERSION}.jar", "commons-pool2-2.12.0.jar"),
     f"no spark-token-provider-kafka-0-10_2.13-{VERSION}.jar"),
    ((f"spark-sql-kafka-0-10_2.13-{VERSION}.jar", f"spark-token-provider-kafka-0-10_2.13-{VERSION}.jar"),
     "no commons-pool2"),
])
def test_an_incomplete_directory_is_an_error(tmp_path: Path, names: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConnectorError, match=message):
        jars_from_directory(jar_dir(tmp_path, *names, "kafka-clients-3.9.1.jar"), VERSION, None, None)


def test_commons_pool2_falls_back_to_debians(tmp_path: Path) -> None:
    directory = jar_dir(tmp_path, f"spark-sql-kafka-0-10_2.13-{VERSION}.jar",
                        f"spark-token-provider-kafka-0-10_2.13-{VERSION}.jar", "kafka-clients-3.9.1.jar")
    debian = tmp_path / "commons-pool2.jar"
    with pytest.raises(ConnectorError, match="no commons-pool2"):
        jars_from_directory(directory, VERSION, None, debian)  # not installed
    debian.write_bytes(b"PK")
    assert debian in jars_from_directory(directory, VERSION, None, debian)


def test_where_the_connector_comes_from(tmp_path: Path) -> None:
    directory = jar_dir(tmp_path, *COMPLETE, "kafka-clients-3.9.1.jar")
    no_default = tmp_path / "no-shared" / "spark-kafka-jars"
    connector = find_connector(VERSION, environ={JARS_ENV: str(directory)}, default_directory=no_default)
    assert connector.available
    assert connector.spark_conf()["spark.jars"].split(",") == [str(p) for p in connector.jars]

    connector = find_connector(VERSION, environ={PACKAGES_ENV: "1"}, default_directory=no_default)
    assert connector.spark_conf() == {"spark.jars.packages": f"org.apache.spark:spark-sql-kafka-0-10_2.13:{VERSION}"}

    connector = find_connector(VERSION, environ={PACKAGES_ENV: "0"}, default_directory=no_default)
    assert not connector.available and connector.spark_conf() == {}
    assert connector.missing_reason is not None
    assert JARS_ENV in connector.missing_reason and PACKAGES_ENV in connector.missing_reason
    assert str(no_default) in connector.missing_reason

    with pytest.raises(ConnectorError, match="is not a directory"):
        find_connector(VERSION, environ={JARS_ENV: str(tmp_path / "nowhere")}, default_directory=no_default)


def test_the_default_is_the_shared_directory_beside_the_project() -> None:
    assert (PROJECT_ROOT / "pyproject.toml").is_file() and (PROJECT_ROOT / "pyspark_examples").is_dir()
    assert PROJECT_ROOT.parent / "shared" / "spark-kafka-jars" == DEFAULT_JARS_DIR


def test_the_shared_directory_serves_when_nothing_is_set(tmp_path: Path) -> None:
    shared = jar_dir(tmp_path, *COMPLETE, "kafka-clients-3.9.1.jar")
    connector = find_connector(VERSION, environ={}, default_directory=shared)
    assert connector.available and connector.jars == jars_from_directory(shared, VERSION, None)

    # What is set explicitly wins over it.
    other = tmp_path / "other"
    other.mkdir()
    for name in (*COMPLETE, "kafka-clients-3.9.0.jar"):
        (other / name).write_bytes(b"PK")
    assert find_connector(VERSION, environ={JARS_ENV: str(other)}, default_directory=shared).jars[-1] == (
        other / "kafka-clients-3.9.0.jar")
    assert find_connector(VERSION, environ={PACKAGES_ENV: "1"}, default_directory=shared).packages


def test_a_shared_directory_that_is_there_but_wrong_is_an_error(tmp_path: Path) -> None:
    shared = jar_dir(tmp_path, "spark-sql-kafka-0-10_2.13-4.0.1.jar", "spark-token-provider-kafka-0-10_2.13-4.0.1.jar",
                     "commons-pool2-2.12.0.jar", "kafka-clients-3.9.1.jar")
    with pytest.raises(ConnectorError, match=f"{shared} holds spark-sql-kafka-0-10_2.13 4.0.1 but pyspark is {VERSION}"):
        find_connector(VERSION, environ={}, default_directory=shared)


MISSING = Connector(missing_reason="no connector here")


@pytest.mark.parametrize("ci", ["true", "1"])
def test_in_ci_a_missing_connector_fails(ci: str) -> None:
    with pytest.raises(pytest.fail.Exception, match="CI must run the Spark end-to-end tests: no connector here"):
        require_connector(MISSING, environ={"CI": ci})


@pytest.mark.parametrize("environ", [{}, {"CI": ""}])
def test_elsewhere_a_missing_connector_skips(environ: dict[str, str]) -> None:
    with pytest.raises(pytest.skip.Exception, match="no connector here"):
        require_connector(MISSING, environ=environ)


@pytest.mark.parametrize("environ", [{}, {"CI": "true"}])
def test_an_available_connector_neither_skips_nor_fails(environ: dict[str, str]) -> None:
    require_connector(Connector(packages="org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.4"), environ=environ)
