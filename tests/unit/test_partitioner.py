from hypothesis import given
from hypothesis import strategies as st

from cdc.wire.partitioner import murmur2, partition_for


def test_murmur2_known_values_from_kafka_utils_test():
    # values from Apache Kafka's UtilsTest.testMurmur2
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        bytes([ord("a"), ord("b"), ord("c")]): 479470107,
    }
    for data, expected in cases.items():
        assert murmur2(data) == expected, data


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=500))
def test_partition_in_range(key, n):
    assert 0 <= partition_for(key, n) < n
