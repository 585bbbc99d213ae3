"""Jar sets from Maven Central, resolved once into a cache outside the repository.

Apache Kafka (``org.apache.kafka:kafka_2.13`` with its tools and a logging backend: the jars
Kafka's binary distribution puts in ``libs/``) and Spark's own Kafka connector
(``org.apache.spark:spark-sql-kafka-0-10_2.13``) are published on Maven Central. This module
writes a tiny ``pom.xml`` per jar set into ``$PYSPARK_KAFKA_CACHE`` (default
``~/.cache/pyspark-kafka/maven``), runs ``mvn dependency:copy-dependencies`` once and returns
the jar paths; later calls reuse the folder (a ``.complete`` marker is written last, and a
file lock keeps two processes from resolving the same set at once).

Raises :class:`MavenUnavailable` (with the reason) when ``java`` or ``mvn`` is missing or
Maven cannot resolve the artifacts (no network, version not served): callers turn that into a
pytest skip, never a crash.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

DEFAULT_KAFKA_VERSION = "4.4.0"
"""Default Apache Kafka version: the newest 4.x whose broker *and* tools jars Maven Central serves
(``kafka_2.13`` and ``kafka-tools`` 4.4.0 both resolve since 2026-11-26; before, only the broker's
did and the default was 4.3.1). ``KAFKA_VERSION`` overrides (``KAFKA_VERSION=4.3.1`` still runs)."""
KAFKA_VERSION_ENV = "KAFKA_VERSION"
CACHE_ENV = "PYSPARK_KAFKA_CACHE"
RESOLVE_TIMEOUT_S = 900

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>pyspark-kafka.cache</groupId>
  <artifactId>{name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""
_DEPENDENCY = "    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"


class MavenUnavailable(Exception):
    """A jar set cannot be had here; the message says why (missing tool, Maven's error tail)."""


def cache_root() -> Path:
    """The cache folder: ``$PYSPARK_KAFKA_CACHE`` or ``~/.cache/pyspark-kafka/maven``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "pyspark-kafka" / "maven")


def require_tools(*tools: str) -> None:
    """Raise :class:`MavenUnavailable` naming the first of ``tools`` (e.g. ``java``, ``mvn``) not on PATH."""
    for tool in tools:
        if shutil.which(tool) is None:
            raise MavenUnavailable(f"{tool} is not on PATH (install Java 17 and Maven, e.g. apt-get install "
                                   f"openjdk-17-jre-headless maven)")


def resolve(name: str, artifacts: list[str]) -> list[Path]:
    """Resolve ``artifacts`` (``group:artifact:version`` strings) with their runtime dependencies.

    ``name`` names the cache folder (one per jar set and version, e.g. ``kafka-4.4.0``).
    Returns the sorted jar paths. Raises :class:`MavenUnavailable` when ``mvn`` is missing or
    resolution fails (the message carries the tail of Maven's output).
    """
    folder = cache_root() / name
    libs = folder / "libs"
    marker = folder / ".complete"
    if not marker.exists():
        require_tools("mvn")
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not marker.exists():
                _run_maven(name, artifacts, folder, libs)
                marker.write_text("\n".join(artifacts) + "\n")
    return sorted(libs.glob("*.jar"))


def _run_maven(name: str, artifacts: list[str], folder: Path, libs: Path) -> None:
    deps = []
    for coord in artifacts:
        g, a, v = coord.split(":")
        deps.append(_DEPENDENCY.format(g=g, a=a, v=v))
    (folder / "pom.xml").write_text(_POM.format(name=name, dependencies="\n".join(deps)))
    if libs.exists():
        shutil.rmtree(libs)
    cmd = ["mvn", "-B", "-q", "-f", str(folder / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={libs}", "-DincludeScope=runtime"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise MavenUnavailable(f"Maven did not resolve {', '.join(artifacts)} within {RESOLVE_TIMEOUT_S} s "
                               f"(is Maven Central reachable?)") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise MavenUnavailable(f"Maven could not resolve {', '.join(artifacts)} (exit {proc.returncode}); "
                               f"command: {' '.join(cmd)}\n{tail}")


def kafka_version() -> str:
    """The Apache Kafka version to run: ``$KAFKA_VERSION`` or :data:`DEFAULT_KAFKA_VERSION`."""
    return os.environ.get(KAFKA_VERSION_ENV) or DEFAULT_KAFKA_VERSION


def kafka_libs(version: str | None = None) -> list[Path]:
    """Apache Kafka's ``libs/`` for ``version`` (default :func:`kafka_version`): the server
    (``kafka_2.13``), the tools (``kafka-tools``: console clients, dump-log, storage tool) and
    log4j2 as the SLF4J backend, as Kafka's binary distribution ships them.

    Raises :class:`MavenUnavailable`.
    """
    version = version or kafka_version()
    return resolve(f"kafka-{version}", [
        f"org.apache.kafka:kafka_2.13:{version}",
        f"org.apache.kafka:kafka-tools:{version}",
        "org.apache.logging.log4j:log4j-slf4j-impl:2.25.4",
    ])


def kafka_classpath(version: str | None = None) -> str:
    """:func:`kafka_libs` joined with ``os.pathsep`` for ``java -cp``. Raises :class:`MavenUnavailable`."""
    require_tools("java")
    return os.pathsep.join(str(p) for p in kafka_libs(version))


CONFIG_COMMAND_MAINS = ("org.apache.kafka.tools.ConfigCommand", "kafka.admin.ConfigCommand")
"""Main class of ``kafka-configs.sh``: in ``kafka-tools`` from Kafka 4.4 (KAFKA-14595 moved it out of the core
jar), ``kafka.admin.ConfigCommand`` in ``kafka_2.13`` before."""


def kafka_main_class(candidates: tuple[str, ...], version: str | None = None) -> str:
    """The first of ``candidates`` (fully qualified class names) that Apache Kafka ``version``'s jars hold, for a tool
    whose main class moved between versions (e.g. :data:`CONFIG_COMMAND_MAINS`). Raises :class:`MavenUnavailable`,
    or LookupError naming the version when no jar holds any of them."""
    import zipfile

    entries = {c.replace(".", "/") + ".class": c for c in candidates}
    found = set()
    for jar in kafka_libs(version):
        if jar.name.startswith("kafka"):
            with zipfile.ZipFile(jar) as z:
                found.update(n for n in z.namelist() if n in entries)
    for entry, name in entries.items():
        if entry in found:
            return name
    raise LookupError(f"none of {', '.join(candidates)} is in Apache Kafka {version or kafka_version()}'s jars")


def config_command_main(version: str | None = None) -> str:
    """Main class of ``kafka-configs.sh`` for Apache Kafka ``version`` (see :data:`CONFIG_COMMAND_MAINS`)."""
    return kafka_main_class(CONFIG_COMMAND_MAINS, version)


SPARK_KAFKA_ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"
SPARK_KAFKA_JARS = ("spark-sql-kafka-0-10_2.13-", "spark-token-provider-kafka-0-10_2.13-", "kafka-clients-",
                    "commons-pool2-")
"""Jars of the connector's runtime dependencies that ``spark.jars`` gets; the rest Maven lists
(Scala, Hadoop client, compression codecs, SLF4J) is already in pyspark's ``jars/`` and must not
be put on the classpath a second time."""


def installed_spark_version() -> str:
    """The installed pyspark's version (``4.3.0``); ``.devN``/``rcN`` suffixes dropped."""
    import pyspark

    return ".".join(pyspark.__version__.split(".")[:3]).split("rc")[0].split(".dev")[0]


def spark_version_candidates(version: str) -> list[str]:
    """The versions :func:`spark_kafka_libs` tries, nearest first: ``version``, the lower patches
    of its minor, then the previous minor's patches 2, 1 and 0 (a short, bounded list: no registry
    scan). ``4.3.0`` → ``[4.3.0, 4.2.2, 4.2.1, 4.2.0]``; ``4.2.1`` → ``[4.2.1, 4.2.0, 4.1.2, 4.1.1, 4.1.0]``."""
    major, minor, patch = (int(x) for x in version.split(".")[:3])
    out = [f"{major}.{minor}.{p}" for p in range(patch, -1, -1)]
    if minor > 0:
        out += [f"{major}.{minor - 1}.{p}" for p in (2, 1, 0)]
    return out


def spark_kafka_libs(spark_version: str | None = None) -> tuple[str, list[Path]]:
    """Spark's own Kafka connector (``spark-sql-kafka-0-10_2.13``) with its runtime dependencies
    (``spark-token-provider-kafka-0-10``, ``kafka-clients``, ``commons-pool2``) for ``spark.jars``.

    ``spark_version`` defaults to the installed pyspark's. When Maven Central does not serve that
    version, the nearest lower one of :func:`spark_version_candidates` that it serves is used.
    Returns ``(version_used, jars)``; the caller must say when ``version_used`` differs from the
    Spark it runs on. Raises :class:`MavenUnavailable` naming every version tried.
    """
    version = spark_version or installed_spark_version()
    reasons = []
    for candidate in spark_version_candidates(version):
        try:
            jars = resolve(f"spark-sql-kafka-{candidate}", [f"{SPARK_KAFKA_ARTIFACT}:{candidate}"])
        except MavenUnavailable as e:
            if shutil.which("mvn") is None:
                raise
            lines = str(e).splitlines()
            reasons.append(f"{candidate}: " + next((ln for ln in lines if "not found" in ln), lines[0]))
            continue
        return candidate, [j for j in jars if j.name.startswith(SPARK_KAFKA_JARS)]
    raise MavenUnavailable(f"Maven Central serves none of {SPARK_KAFKA_ARTIFACT} "
                           f"{', '.join(spark_version_candidates(version))}:\n" + "\n".join(reasons))
