"""The progress report's time split, read from the Java map's text in one Py4J call."""

from hypothesis import given
from hypothesis import strategies as st

from merger.spark.progress import parse_durations

PHASE = st.text(alphabet=st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=20)


def java_text(durations: dict[str, int]) -> str:
    """What java.util.HashMap.toString() gives (AbstractMap's format)."""
    return "{" + ", ".join(f"{k}={v}" for k, v in durations.items()) + "}"


def test_a_report_as_spark_writes_it():
    text = "{triggerExecution=367, queryPlanning=7, getBatch=0, commitOffsets=15, latestOffset=18, addBatch=314}"
    assert parse_durations(text) == {
        "triggerExecution": 367,
        "queryPlanning": 7,
        "getBatch": 0,
        "commitOffsets": 15,
        "latestOffset": 18,
        "addBatch": 314,
    }


def test_an_empty_map():
    assert parse_durations("{}") == {}


@given(st.dictionaries(PHASE, st.integers(min_value=0, max_value=10**12), max_size=10))
def test_every_map_reads_back(durations):
    assert parse_durations(java_text(durations)) == durations
