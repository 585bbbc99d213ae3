"""Tests of the shared durable-write helpers (``pyspark_kafka.kafka.fsutil``)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from pyspark_kafka.kafka import fsutil


def _record_sync_calls(monkeypatch) -> list:
    """Patch os.fsync/replace/link so each call is recorded as (name, kind) before running."""
    calls = []
    real_fsync, real_replace, real_link = os.fsync, os.replace, os.link

    def fsync(fd):
        mode = os.fstat(fd).st_mode
        calls.append(("fsync", "dir" if stat.S_ISDIR(mode) else "file"))
        real_fsync(fd)

    def replace(src, dst):
        calls.append(("replace", os.path.basename(src)))
        real_replace(src, dst)

    def link(src, dst):
        calls.append(("link", os.path.basename(src)))
        real_link(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "link", link)
    return calls


def test_atomic_write_replaces_and_syncs_file_then_directory(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    calls = _record_sync_calls(monkeypatch)
    fsutil.atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no temp file left
    assert calls == [("fsync", "file"), ("replace", "state.json.tmp"), ("fsync", "dir")]


def test_atomic_write_accepts_str_paths(tmp_path):
    fsutil.atomic_write(str(tmp_path / "a"), b"x")
    assert (tmp_path / "a").read_bytes() == b"x"


def test_create_only_publishes_with_link_and_syncs(tmp_path, monkeypatch):
    target = tmp_path / "00000000000000000001.json"
    calls = _record_sync_calls(monkeypatch)
    fsutil.atomic_write(target, b"{}", overwrite=False)
    assert target.read_bytes() == b"{}"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    assert [c[0] for c in calls] == ["fsync", "link", "fsync"]
    assert calls[1][1].startswith(".tmp-")


def test_create_only_fails_when_the_name_exists_and_keeps_the_winner(tmp_path, monkeypatch):
    target = tmp_path / "m.json"
    target.write_bytes(b"first")
    calls = _record_sync_calls(monkeypatch)
    with pytest.raises(FileExistsError):
        fsutil.atomic_write(target, b"second", overwrite=False)
    assert target.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]  # the temp file is removed
    assert ("fsync", "dir") not in calls  # nothing published: no directory sync


def test_write_synced_truncates(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"a much longer old content")
    fsutil.write_synced(path, b"short")
    assert path.read_bytes() == b"short"


def test_fsync_helpers_raise_for_missing_paths(tmp_path):
    with pytest.raises(FileNotFoundError):
        fsutil.fsync_dir(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        fsutil.fsync_file(tmp_path / "missing")


def test_fsutil_imports_nothing_from_the_package():
    code = "import sys, pyspark_kafka.kafka.fsutil; print(sorted(m for m in sys.modules if m.startswith('pyspark_kafka')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['pyspark_kafka', 'pyspark_kafka.kafka', 'pyspark_kafka.kafka.fsutil']"
