"""``get_spark``: no pandas FutureWarning from pyspark on every run (issue 27)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_no_pandas_future_warning_in_driver_or_workers():
    pandas = pytest.importorskip("pandas")
    if int(pandas.__version__.split(".")[0]) < 3:
        pytest.skip("pyspark warns only under pandas >= 3")
    code = ("import pandas as pd\n"
            "from pyspark_kafka.spark import get_spark\n"
            "spark = get_spark('pandas-notice')\n"
            "df = spark.createDataFrame(pd.DataFrame({'a': [1, 2]}))\n"
            "assert df.toPandas()['a'].tolist() == [1, 2]\n"
            "from pyspark.sql.functions import pandas_udf\n"
            "plus = pandas_udf(lambda s: s + 1, 'long')\n"
            "assert [r[0] for r in df.select(plus('a')).collect()] == [2, 3]\n"
            "spark.stop()\n")
    r = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "does not yet fully support pandas" not in r.stderr, r.stderr[-3000:]
