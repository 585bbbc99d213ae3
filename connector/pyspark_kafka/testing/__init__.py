"""Test support for users and for this project: Kafka clusters (embedded, Apache Kafka from Maven Central), jar caches."""
