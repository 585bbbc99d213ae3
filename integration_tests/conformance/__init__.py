"""Client conformance matrix of the embedded broker: scenarios × clients → pass/fail/unsupported.

``scenarios.py`` is the scenario script, ``drivers/`` holds one driver per client
(confluent-kafka, kafka-python, aiokafka, kcat), ``matrix.py`` runs and renders it,
``python -m integration_tests.conformance`` writes ``results.json`` and ``docs/compatibility.md``.
"""
