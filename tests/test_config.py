"""Broker configuration: properties syntax, synonyms, validation, meta.properties."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.config import BROKER_CONFIG_DEFS, BrokerConfig, ConfigError
from kbroker.meta_properties import load_or_create_meta
from kbroker.properties import parse_properties
from tests.fsyncs import record_syncs

PROJECT = Path(__file__).resolve().parent.parent


def test_properties_syntax() -> None:
    text = "\n".join([
        "# comment",
        "! also a comment",
        "a=1",
        "b : two",
        "c three",
        "  d = spaced value  ",
        "long=first,\\",
        "   second",
        r"esc\=key=x\ty",
        "empty=",
    ])
    assert parse_properties(text) == {
        "a": "1", "b": "two", "c": "three", "d": "spaced value", "long": "first,second",
        "esc=key": "x\ty", "empty": "",
    }


def test_shipped_server_properties_are_all_known() -> None:
    path = PROJECT / "conf" / "server.properties"
    props = parse_properties(path.read_text())
    assert set(props) <= set(BROKER_CONFIG_DEFS)
    # Every commented default line names a real property with its real default.
    for line in path.read_text().splitlines():
        if line.startswith("#") and "=" in line and " " not in line.split("=")[0]:
            name, _, value = line[1:].partition("=")
            assert name in BROKER_CONFIG_DEFS, name
            assert value == (BROKER_CONFIG_DEFS[name].default or ""), name
    config = BrokerConfig.load(path)
    assert config.listeners_parsed()[0].port == 9092


def test_retention_defaults_to_two_weeks_and_synonyms_rank_like_kafka() -> None:
    assert BrokerConfig({}).topic_defaults()["retention.ms"] == str(14 * 24 * 3_600_000)
    hours = BrokerConfig({"log.retention.hours": "1"}).topic_default_entries()["retention.ms"]
    assert hours == ("3600000", "log.retention.hours", "static")
    both = BrokerConfig({"log.retention.hours": "1", "log.retention.minutes": "5"})
    assert both.topic_defaults()["retention.ms"] == "300000"
    both.apply_dynamic({"log.retention.ms": "42"}, {})
    assert both.topic_default_entries()["retention.ms"] == ("42", "log.retention.ms", "dynamic-default")
    both.apply_dynamic({"log.retention.ms": "42"}, {"log.retention.ms": "7"})
    assert both.topic_default_entries()["retention.ms"] == ("7", "log.retention.ms", "dynamic")
    assert BrokerConfig({"message.max.bytes": "2000"}).topic_defaults()["max.message.bytes"] == "2000"


def test_overrides_win_and_node_id_is_a_synonym(tmp_path: Path) -> None:
    path = tmp_path / "s.properties"
    path.write_text("num.partitions=3\nnode.id=7\n")
    config = BrokerConfig.load(path, ["num.partitions=5", "log.dirs=/a,/b"])
    assert (config.num_partitions, config.broker_id, config.log_dirs) == (5, 7, ["/a", "/b"])


@pytest.mark.parametrize(
    "props",
    [
        {"num.partitions": "many"},
        {"num.partitions": "0"},
        {"auto.create.topics.enable": "yes"},
        {"listeners": "127.0.0.1:9092"},
        {"listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"},
        {"log.cleanup.policy": "shred"},
        {"log.retention.hours": "soon"},
        {"log.flush.rolled.busy.percent": "0"},
        {"log.flush.rolled.busy.percent": "101"},
    ],
)
def test_invalid_values_are_config_errors(props: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        BrokerConfig(props)


def test_override_without_equals_is_an_error() -> None:
    with pytest.raises(ConfigError):
        BrokerConfig.load(None, ["num.partitions"])


def test_meta_properties_pins_broker_and_cluster(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    cluster = load_or_create_meta(dirs, 3, None)
    assert load_or_create_meta(dirs, 3, None) == cluster
    assert load_or_create_meta(dirs, 3, cluster) == cluster
    with pytest.raises(ConfigError, match="belongs to broker 3"):
        load_or_create_meta(dirs, 4, None)
    with pytest.raises(ConfigError, match="cluster.id"):
        load_or_create_meta(dirs, 3, "another-cluster")
    fresh = tmp_path / "c"
    fresh.mkdir()
    assert load_or_create_meta([dirs[0], fresh], 3, None) == cluster
    assert f"cluster.id={cluster}" in (fresh / "meta.properties").read_text()


def test_new_meta_properties_survive_a_power_loss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The rename that creates meta.properties is durable only once its directory is fsynced;
    # without it a crash could bring the log dir back without the file, and a new cluster id.
    log_dir = (tmp_path / "logs").resolve()
    log_dir.mkdir()
    syncs = record_syncs(monkeypatch)
    load_or_create_meta([log_dir], 1, None)
    assert syncs.index("fsync", log_dir) > syncs.index("replace", log_dir / "meta.properties")


def test_start_with_a_bad_config_prints_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kbroker.cli.main", "start", "--override", "num.partitions=zero",
         "--override", f"log.dirs={tmp_path}"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "num.partitions" in result.stderr.strip().splitlines()[-1]


def test_broker_local_retention_sets_tiered_topics_defaults() -> None:
    """Kafka's log.local.retention.* are the defaults of local.retention.* (-2: the total's)."""
    defaults = BrokerConfig({"log.local.retention.ms": "1000", "log.local.retention.bytes": "5"}).topic_defaults()
    assert (defaults["local.retention.ms"], defaults["local.retention.bytes"]) == ("1000", "5")
    assert BrokerConfig({}).topic_defaults()["local.retention.ms"] == "-2"
