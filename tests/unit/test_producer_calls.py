"""What a producer call of ingest raises (ingest/producer.py ``broker_call``): only the
module's own errors, whatever confluent-kafka fails with, so ingest retries or stops with
a message instead of a traceback."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdc.errors import BrokerError
from ingest.producer import ProducerFenced, RecordTooLarge, TransactionalProducer


class Failing:
    """A librdkafka producer whose every call raises ``exc``."""

    def __init__(self, exc: BaseException):
        self.exc = exc

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise self.exc

        return call


def _producer(exc: BaseException) -> TransactionalProducer:
    p = object.__new__(TransactionalProducer)  # no broker: the state __init__ would set
    p._producer = Failing(exc)
    p._open, p._errors, p._too_large, p._fenced, p._topics = False, [], None, None, set()
    p._timeout, p.max_message_bytes = 1.0, 1 << 20
    return p


CALLS = [
    ("begin", ()),
    ("send", ("t", b"k", b"v", 0)),
    ("send_all", ([("t", b"k", b"v", 0, None)],)),
    ("commit_with", ("offsets", b"k", b"v")),
]


@pytest.mark.parametrize("method,args", CALLS)
def test_an_odd_failure_is_a_broker_error(method, args):
    odd = SystemError("<method 'code' of 'cimpl.KafkaError' objects> returned a result with an exception set")
    with pytest.raises(BrokerError, match="the producer failed: SystemError"):
        getattr(_producer(odd), method)(*args)


@pytest.mark.parametrize("method,args", CALLS)
def test_after_a_fencing_any_failure_is_the_fencing(method, args):
    p = _producer(RuntimeError("anything"))
    p._fenced = "Local: This instance has been fenced by a newer instance"
    with pytest.raises(ProducerFenced):
        getattr(p, method)(*args)


def test_a_fencing_named_by_the_exception_is_the_fencing():
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))
    with pytest.raises(ProducerFenced):
        _producer(fenced).begin()


def test_the_modules_own_errors_pass_unchanged():
    too_large = RecordTooLarge("t", b"k", 10, 5, None, False)
    with pytest.raises(RecordTooLarge):
        _producer(too_large).send("t", b"k", b"v", 0)
