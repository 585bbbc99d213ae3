"""The broker's one error table (:mod:`pyspark_kafka.broker.errors`): codes are kio's ErrorCode members."""

from __future__ import annotations

import pytest

from pyspark_kafka.broker import errors
from pyspark_kafka.broker.errors import ErrorCode, KafkaError


def _all_errors(cls=KafkaError):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_errors(sub)


@pytest.mark.parametrize("cls", list(_all_errors()), ids=lambda c: c.__name__)
def test_every_error_carries_a_kio_error_code(cls):
    assert isinstance(cls.error_code, ErrorCode)
    assert issubclass(cls, errors.for_code(cls.error_code))


def test_mapping_helpers():
    assert errors.for_code(3) is errors.UnknownTopicOrPartitionError
    assert errors.for_code(40) is errors.InvalidConfigError  # ConfigError shares the code
    assert errors.for_code(ErrorCode.not_coordinator) is KafkaError  # a code no broker error carries
    with pytest.raises(ValueError):
        errors.for_code(12345)
    assert errors.error_code_of(errors.CorruptRecordError("bad crc")) == ErrorCode.corrupt_message == 2
    assert errors.error_code_of(RuntimeError("bug")) == ErrorCode.unknown_server_error
