"""End-to-end suite on every Kafka backend, and the client conformance matrix (docs/testing.md)."""
