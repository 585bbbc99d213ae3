"""Test support for users and for this project: Kafka clusters by backend name (``clusters``:
embedded, Apache Kafka from Maven Central or testcontainers, an existing cluster), the Apache Kafka
launcher and its jar cache, the pytest plugin."""
