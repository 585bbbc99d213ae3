"""Helpers of the unit tests, not tests themselves: imported as ``support.<module>``.

``setup.cfg`` puts ``tests/`` on ``pythonpath`` (``[tool:pytest]``), so every test file imports
them explicitly (``from support.wire import WireClient``); the scripts in here that run as
subprocesses (the kill drivers, ``fuzz_capture.py``, ``fuzz_inprocess.py``) put ``tests/`` on
``sys.path`` themselves where they import a sibling. Fixtures live in the ``conftest.py`` files.
"""
