"""Python workers of sessions from ``get_spark`` import the installed pyspark (compiled bytecode),
not ``pyspark.zip`` (compiled again in every new worker): :mod:`pyspark_kafka.worker_daemon`."""

from __future__ import annotations

import os

import pytest

from pyspark_kafka.worker_daemon import bundled_pyspark_archive, without_bundled_archives


def _touch(path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return str(path)


@pytest.mark.parametrize("layout, init, expected", [
    ("site/pyspark/python/lib/pyspark.zip", "site/pyspark/__init__.py", True),  # pip-installed pyspark
    ("site/pyspark/python/lib/pyspark.zip", None, False),  # no package beside it
    ("spark-4.3.0/python/lib/pyspark.zip", "spark-4.3.0/__init__.py", False),  # a Spark distribution's zip
    ("site/pyspark/python/lib/py4j-0.10.9.9-src.zip", "site/pyspark/__init__.py", False),  # not pyspark's zip
    ("site/pyspark/lib/pyspark.zip", "site/pyspark/__init__.py", False),  # not <pkg>/python/lib
    ("site/pyspark/jars/spark-core_2.13-4.3.0.jar", "site/pyspark/__init__.py", True),  # the package's own jar
    ("site/pyspark/jars/spark-core_2.13-4.3.0.jar", None, False),  # no package beside it
    ("spark-4.3.0/jars/spark-core_2.13-4.3.0.jar", "spark-4.3.0/__init__.py", False),  # a Spark distribution's
    ("site/pyspark/lib/spark-core_2.13-4.3.0.jar", "site/pyspark/__init__.py", False),  # not <pkg>/jars
])
def test_only_the_installed_packages_own_zip_and_jars_are_dropped(tmp_path, layout, init, expected):
    entry = _touch(tmp_path / layout)
    if init:
        _touch(tmp_path / init)
    assert bundled_pyspark_archive(entry) is expected
    path = ["/a", entry, "/b"]
    assert without_bundled_archives(path) == (["/a", "/b"] if expected else path)


def test_spark_workers_import_the_installed_pyspark_not_the_zip(spark):
    assert spark.conf.get("spark.python.daemon.module") == "pyspark_kafka.worker_daemon"

    def probe(_):
        import sys

        import pyspark

        return pyspark.__file__, [p for p in sys.path if p.endswith(".zip")]

    [(pyspark_file, zips)] = spark.sparkContext.parallelize([0], 1).map(probe).collect()
    assert ".zip" not in pyspark_file and os.path.isfile(pyspark_file), pyspark_file
    assert not any(os.path.basename(z) == "pyspark.zip" for z in zips), zips


@pytest.mark.skipif(os.name != "posix", reason="the launcher is a /bin/sh script")
def test_launcher_runs_python_without_the_installed_pyspark_zip(tmp_path):
    import subprocess
    import sys

    from pyspark_kafka.worker_daemon import launcher

    own_zip = _touch(tmp_path / "site/pyspark/python/lib/pyspark.zip")
    _touch(tmp_path / "site/pyspark/__init__.py")
    other_zip = _touch(tmp_path / "spark-4.3.0/python/lib/pyspark.zip")  # a distribution's zip: kept
    own_jar = _touch(tmp_path / "site/pyspark/jars/spark-core_2.13-4.3.0.jar")  # the package's jar: dropped
    path = launcher(sys.executable, str(tmp_path / "launchers"))
    assert path is not None and os.access(path, os.X_OK)
    assert launcher(sys.executable, str(tmp_path / "launchers")) == path  # written once per interpreter
    probe = "import os, sys; print(os.environ.get('PYTHONPATH')); print(sys.argv[1:]); sys.exit(3)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([own_zip, "/a b*", own_jar, other_zip])}
    done = subprocess.run([path, "-c", probe, "x y", "*"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr  # arguments and exit status pass through
    assert done.stdout.splitlines() == [os.pathsep.join(["/a b*", other_zip]), "['x y', '*']"]
    env["PYTHONPATH"] = own_zip
    done = subprocess.run([path, "-c", "import os; print(os.environ.get('PYTHONPATH'))"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "None"


def test_driver_side_python_processes_start_through_the_launcher(monkeypatch):
    import sys

    from pyspark_kafka.spark import ensure_worker_python

    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    ensure_worker_python()
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    driver = os.environ["PYSPARK_DRIVER_PYTHON"]
    if os.name == "posix":
        assert driver != sys.executable and f"exec {sys.executable} " in open(driver).read()
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", "/opt/my/python")  # the user's choice is kept
    ensure_worker_python()
    assert os.environ["PYSPARK_DRIVER_PYTHON"] == "/opt/my/python"


def test_a_worker_whose_socket_spark_closed_ends_quietly(capsys):
    """Issue 37: a stopped query or an exiting driver left pyspark's daemon printing a
    ``BrokenPipeError`` traceback per worker; the wrapped worker ends with code 1, silently."""
    from pyspark_kafka.worker_daemon import quiet_on_closed_socket

    def closed(sock, authenticated):
        raise BrokenPipeError(32, "Broken pipe")

    assert quiet_on_closed_socket(closed)(None, True) == 1
    assert quiet_on_closed_socket(lambda sock, authenticated: 0)(None, True) == 0
    assert capsys.readouterr().err == ""


def _installed_pyspark_zip() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "python", "lib", "pyspark.zip")


def test_the_startup_pth_makes_any_spark_python_process_import_the_installed_pyspark():
    """``pip install`` (``-e`` too) puts ``_pyspark_kafka_startup.pth`` into ``site-packages``; with the
    installed pyspark's own zip on ``PYTHONPATH`` (as Spark starts every Python process, in sessions
    not built by ``get_spark`` too) a new interpreter imports pyspark's compiled package instead;
    ``PYSPARK_KAFKA_KEEP_PYSPARK_ZIP`` turns that off."""
    import site
    import subprocess
    import sys

    from pyspark_kafka.worker_daemon import KEEP_ZIP_ENV, STARTUP_PTH

    source = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "connector", STARTUP_PTH)
    installed = [os.path.join(d, STARTUP_PTH) for d in site.getsitepackages() if os.path.isfile(os.path.join(d, STARTUP_PTH))]
    assert installed, f"{STARTUP_PTH} is not in site-packages: install the package with pip (setup.py copies it)"
    assert open(installed[0]).read() == open(source).read()
    zip_path = _installed_pyspark_zip()
    assert os.path.isfile(zip_path)
    jars = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(zip_path))), "jars")
    core_jar = sorted(f for f in os.listdir(jars) if f.startswith("spark-core_"))[0]
    # the modules pyspark's worker imports look for ``org`` (copy.py's Jython check): a namespace package in the jar
    probe = ("import pyspark, copy, importlib, sys; importlib.invalidate_caches(); print(pyspark.__file__); "
             "print(sum(p.endswith('pyspark.zip') for p in [*sys.path, *sys.path_importer_cache])); "
             "print(sum('.jar' in p for p in [*sys.path, *sys.path_importer_cache]))")
    env = {k: v for k, v in os.environ.items() if k != KEEP_ZIP_ENV}
    env["PYTHONPATH"] = os.pathsep.join([zip_path, "/nonexistent", os.path.join(jars, core_jar)])  # as Spark sets it
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr, done.stderr
    pyspark_file, zips, jar_entries = done.stdout.split()
    assert ".zip" not in pyspark_file and os.path.isfile(pyspark_file) and zips == "0", done.stdout
    assert jar_entries == "0", done.stdout  # no zip importer left to read the jar's directory again
    env[KEEP_ZIP_ENV] = "1"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    pyspark_file, zips, jar_entries = done.stdout.split()
    assert pyspark_file == os.path.join(zip_path, "pyspark", "__init__.py") and int(zips) >= 1, done.stdout
    assert int(jar_entries) >= 1, done.stdout


PLANNER_PROBE = r"""
import json, os, sys
from pyspark_kafka.spark import get_spark

spark = get_spark("planner-probe")
spark.read.format("pykafka").option("kafka.bootstrap.servers", sys.argv[1]).option(
    "subscribe", sys.argv[2]).load().count()  # starts the create and plan planner workers
jvm = spark.sparkContext._gateway.proc.pid


def args(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode() for a in f.read().split(b"\0") if a]
    except OSError:
        return []


children = []
for entry in os.listdir("/proc"):
    try:
        with open(f"/proc/{entry}/stat") as f:
            if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == jvm:
                children.append(int(entry))
    except (OSError, ValueError, IndexError):
        continue
print(json.dumps([args(p) for p in children]), flush=True)
spark.stop()
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process tree from /proc")
def test_planner_workers_of_get_spark_end_quietly_on_a_closed_socket(bootstrap, make_topic):
    """The driver-side planner workers' daemon (``-m pyspark.daemon``, which ``spark.python.daemon.module``
    does not choose) runs as ``pyspark_kafka.worker_daemon`` through the launcher, so a planner worker
    whose socket Spark closed at ``spark.stop()`` prints no ``BrokenPipeError`` traceback (the flights
    example's output ended with one now and then). A new driver process, as a user's job starts (this
    test session's own may have been built after an earlier test set ``PYSPARK_DRIVER_PYTHON``: a
    whole-suite run saw its planners started by a plain ``python3``). About 15 s."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON")}
    done = subprocess.run([sys.executable, "-c", PLANNER_PROBE, bootstrap, make_topic(partitions=1)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    children = json.loads(done.stdout.strip().splitlines()[-1])
    # a process still in the launcher (/bin/sh, before its exec) has the launcher's arguments: left out
    daemons = [a for a in children if "-m" in a and not os.path.basename(a[0]).endswith("sh")]
    planners = [a for a in daemons if any(x.startswith("pyspark.sql.worker.") for x in a)]
    assert planners, daemons
    wrong = [" ".join(a) for a in planners if a[a.index("-m") + 1] != "pyspark_kafka.worker_daemon"]
    assert not wrong, "planner daemons not started as pyspark_kafka.worker_daemon:\n" + "\n".join(wrong)


def test_the_startup_pth_runs_after_an_editable_install_path_and_before_other_packages_hooks():
    """``site`` runs ``.pth`` files in sorted name order. The package's one must come after setuptools'
    editable-install ``.pth`` (else ``pyspark_kafka`` is not importable yet in an editable install) and before
    the start-up hooks other packages commonly install, so that a plain session's source-runner stand-in hands
    itself to the runner zygote before they run (measured: a ``certifi`` hook cost each stand-in 15-18 ms)."""
    from pyspark_kafka.worker_daemon import STARTUP_PTH

    before = ["__editable__.pyspark_kafka-0.1.0.pth", "__editable___pyspark_kafka_0_1_0_finder.pth"]
    after = ["_sandboxing_egress_ca.pth", "_virtualenv.pth", "distutils-precedence.pth", "easy-install.pth",
             "matplotlib-3.9.0-py3.11-nspkg.pth", "google_api_core-2.19.0-py3.9-nspkg.pth", "protobuf-4.25-nspkg.pth",
             "pywin32.pth", "zope.interface-6.0-py3.11-nspkg.pth", "coverage.pth", "a1_coverage.pth"]
    order = sorted([*before, STARTUP_PTH, *after])
    assert order.index(STARTUP_PTH) == len(before), order
