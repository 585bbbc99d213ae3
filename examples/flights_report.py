"""Report of the flights pipeline, read back from the sink's table.

Reads ``flights_enriched`` with plain :mod:`sqlite3`, or the Delta table with ``deltalake``
(``--sink delta``), not with Spark, so the numbers are what the exactly-once sink committed:
per carrier the number of flights and the mean departure and arrival delay (minutes; NULL
delays of cancelled flights are skipped, as SQL ``AVG`` does), a bar chart of the same, and a
check line on exactly-once delivery.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

TABLE = "flights_enriched"


@dataclass(frozen=True)
class CarrierStats:
    """One carrier's line of the report. Delays in minutes; None when all are NULL."""

    carrier: str
    carrier_name: str | None
    flights: int
    mean_dep_delay: float | None
    mean_arr_delay: float | None


@dataclass(frozen=True)
class Check:
    """Exactly-once check: ``rows`` in the table, ``distinct`` (kafka_partition,
    kafka_offset) pairs, and the ``expected`` number of flights."""

    rows: int
    distinct: int
    expected: int

    @property
    def ok(self) -> bool:
        """True when every expected flight is there exactly once."""
        return self.rows == self.distinct == self.expected


def carrier_stats(db_path: str | Path) -> list[CarrierStats]:
    """Per-carrier counts and mean delays from ``flights_enriched``, most flights first.

    Returns an empty list when the table does not exist yet (nothing committed).
    """
    with sqlite3.connect(db_path) as conn:
        if not _table_exists(conn):
            return []
        rows = conn.execute(
            f"SELECT carrier, MAX(carrier_name), COUNT(*), AVG(dep_delay), AVG(arr_delay) "
            f"FROM {TABLE} GROUP BY carrier ORDER BY COUNT(*) DESC, carrier"
        ).fetchall()
    return [CarrierStats(*r) for r in rows]


def check(db_path: str | Path, expected: int) -> Check:
    """Count rows and distinct (kafka_partition, kafka_offset) pairs of ``flights_enriched``."""
    with sqlite3.connect(db_path) as conn:
        if not _table_exists(conn):
            return Check(0, 0, expected)
        rows, distinct = conn.execute(
            f"SELECT (SELECT COUNT(*) FROM {TABLE}), "
            f"(SELECT COUNT(*) FROM (SELECT DISTINCT kafka_partition, kafka_offset FROM {TABLE}))"
        ).fetchone()
    return Check(rows, distinct, expected)


def read_delta(table_path: str | Path):
    """The Delta table at ``table_path`` as a ``pandas.DataFrame`` read by ``deltalake`` (the
    committed version: files of uncommitted writes are not read), or None when no table exists
    there yet. Raises ModuleNotFoundError without deltalake (``pip install "pyspark-kafka[delta]"``)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(table_path)).to_pyarrow_table().to_pandas()
    except TableNotFoundError:
        return None


def carrier_stats_delta(table_path: str | Path) -> list[CarrierStats]:
    """:func:`carrier_stats` of the Delta table at ``table_path`` (mean delays skip nulls, as SQL
    ``AVG`` does). Returns an empty list when no table exists yet."""
    df = read_delta(table_path)
    if df is None or df.empty:
        return []
    g = df.groupby("carrier").agg(name=("carrier_name", "max"), flights=("carrier", "size"),
                                  dep=("dep_delay", "mean"), arr=("arr_delay", "mean"))
    g = g.reset_index().sort_values(["flights", "carrier"], ascending=[False, True])
    return [CarrierStats(r.carrier, None if _missing(r.name) else r.name, int(r.flights),
                         None if _missing(r.dep) else float(r.dep), None if _missing(r.arr) else float(r.arr))
            for r in g.itertuples(index=False)]


def check_delta(table_path: str | Path, expected: int) -> Check:
    """:func:`check` of the Delta table at ``table_path``: rows and distinct
    (kafka_partition, kafka_offset) pairs."""
    df = read_delta(table_path)
    if df is None:
        return Check(0, 0, expected)
    return Check(len(df), len(df.drop_duplicates(["kafka_partition", "kafka_offset"])), expected)


def _missing(value) -> bool:
    return value is None or value != value  # None or NaN


def _table_exists(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (TABLE,)).fetchone() is not None


def format_report(stats: list[CarrierStats], chk: Check) -> str:
    """The report as text: one line per carrier, then the check line."""
    lines = [f"{'carrier':<8}{'name':<30}{'flights':>9}{'mean dep delay':>16}{'mean arr delay':>16}"]
    for s in stats:
        lines.append(
            f"{s.carrier:<8}{(s.carrier_name or '?'):<30}{s.flights:>9,}"
            f"{_minutes(s.mean_dep_delay):>16}{_minutes(s.mean_arr_delay):>16}"
        )
    lines.append(format_check(chk))
    return "\n".join(lines)


def format_check(chk: Check) -> str:
    """``check: rows=336,776 distinct (kafka_partition, kafka_offset)=336,776 expected=336,776 -> OK``."""
    verdict = "OK" if chk.ok else "MISMATCH"
    return (
        f"check: rows={chk.rows:,} distinct (kafka_partition, kafka_offset)={chk.distinct:,} "
        f"expected={chk.expected:,} -> {verdict}"
    )


def _minutes(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} min"


def write_chart(stats: list[CarrierStats], png_path: str | Path) -> Path:
    """Horizontal bar chart of mean departure and arrival delay per carrier (PNG, Agg backend).

    Carriers are labelled ``name (code, n flights)``. Returns the path written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted(stats, key=lambda s: s.mean_arr_delay if s.mean_arr_delay is not None else 0.0)
    labels = [f"{s.carrier_name or s.carrier} ({s.carrier}, {s.flights:,})" for s in ordered]
    y = list(range(len(ordered)))
    height = 0.4
    fig, ax = plt.subplots(figsize=(10, 0.45 * max(len(ordered), 4) + 1.5))
    ax.barh([i + height / 2 for i in y], [s.mean_dep_delay or 0.0 for s in ordered], height, label="departure")
    ax.barh([i - height / 2 for i in y], [s.mean_arr_delay or 0.0 for s in ordered], height, label="arrival")
    ax.set_yticks(y, labels)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("mean delay (minutes)")
    ax.set_title(f"NYC flights 2013: mean delay by carrier ({sum(s.flights for s in stats):,} flights)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = Path(png_path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
