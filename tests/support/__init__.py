"""Helpers of the unit tests, not tests themselves: imported as ``support.<module>``.

``setup.cfg`` puts ``tests/`` on ``pythonpath`` (``[tool:pytest]``), so every test file imports
them explicitly (``from support.wire import WireClient``); the scripts in here that run as
subprocesses (the kill drivers, ``fuzz_capture.py``, ``fuzz_inprocess.py``) put ``tests/`` on
``sys.path`` themselves where they import a sibling. Fixtures live in the ``conftest.py`` files.
``integration_tests/`` imports these helpers too (never the other way round: ``pytest tests`` does not make
``integration_tests`` importable); ``java_driver`` (the conformance suite's Java program) and
``kafka_tools.ToolServer`` (Kafka's tools in one JVM, ``java/ToolServer.java``) serve both suites.
"""
