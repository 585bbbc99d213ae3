"""Errors raised by pyspark-kafka. Every message names the cause and the fix."""


class PySparkKafkaError(Exception):
    """Base class of the errors this package raises."""


class OptionError(PySparkKafkaError, ValueError):
    """A data source option is missing, malformed or contradicts another option.

    The message names the option, the value received (secrets redacted) and the fix.
    """


class DataLossError(PySparkKafkaError):
    """Offsets the query needs are gone from the topic (retention, deletion).

    Raised when ``failOnDataLoss=true``; the message names topic, partition and
    the missing offset range.
    """


class DeliveryError(PySparkKafkaError):
    """A record was not acknowledged by the broker; the task fails so nothing is lost."""
