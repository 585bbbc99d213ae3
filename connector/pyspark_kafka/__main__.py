"""``python -m pyspark_kafka`` runs the ``pyspark-kafka`` console script."""
from pyspark_kafka.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
