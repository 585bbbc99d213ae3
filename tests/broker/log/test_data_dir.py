"""The broker's data directory: a file given as one is named; a brand-new one is not an unclean shutdown (issue 27)."""

from __future__ import annotations

import logging

import pytest

from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.errors import KafkaStorageError


def test_a_file_as_data_dir_is_named(tmp_path):
    path = tmp_path / "data"
    path.write_text("not a directory")
    with pytest.raises(KafkaStorageError, match=f"the data directory {path} is a file, not a directory"):
        EmbeddedBroker(data_dir=path).start()


def test_a_new_data_dir_is_not_reported_as_an_unclean_shutdown(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="pyspark_kafka.broker"):
        with EmbeddedBroker(data_dir=tmp_path / "new"):
            pass
        first = [r.getMessage() for r in caplog.records if "shutdown" in r.getMessage()]
        caplog.clear()
        with EmbeddedBroker(data_dir=tmp_path / "new"):  # restarted after a clean stop
            pass
        second = [r.getMessage() for r in caplog.records if "shutdown" in r.getMessage()]
    assert first and all("unclean" not in m and "new data directory" in m for m in first), first
    assert second and all("clean shutdown" in m and "unclean" not in m for m in second), second
