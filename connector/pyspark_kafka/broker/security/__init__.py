"""The embedded broker's listeners, TLS and SASL authentication (issue #18, broker side).

- :mod:`.listeners`: ``listeners`` / ``advertised.listeners`` / ``listener.security.protocol.map``
  parsed with Kafka's rules into :class:`~.listeners.Listener` endpoints.
- :mod:`.tls`: the ``ssl.SSLContext`` of an SSL or SASL_SSL listener from Kafka's ``ssl.*`` configs.
- :mod:`.jaas`: the ``user_<name>="<password>"`` entries of a PlainLoginModule JAAS config.
- :mod:`.plain`: the server side of SASL/PLAIN.
- :mod:`.scram`: SCRAM-SHA-256/512 credentials and the server side of RFC 5802 / RFC 7677.
- :mod:`.credentials`: the durable SCRAM credential store (salt, StoredKey, ServerKey only).
- :mod:`.session`: one connection's security state: listener, SASL state machine, principal.
- :mod:`.acls`: ACL bindings and filters (Kafka's ``org.apache.kafka.common.acl``) and their durable store.
- :mod:`.authorizer`: Kafka's ``StandardAuthorizer`` rules (``authorizer.class.name``, ``super.users``,
  ``allow.everyone.if.no.acl.found``); handlers ask it through ``RequestContext.authorized``.

Principals (``RequestContext.principal``): ``User:<name>`` after SASL; ``User:ANONYMOUS`` on
PLAINTEXT and on SSL without a client certificate; ``User:CN=...,O=...`` for a TLS client
certificate, as Kafka's ``DefaultKafkaPrincipalBuilder``.
"""
