"""cdc verify's exit code and its line about skipped sinks (cdc/cli/verify.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cdc.cli.verify import EXIT_DIFFERENT, EXIT_EQUAL, EXIT_NOT_VERIFIED, EXIT_SKIPPED, exit_code, skipped_line
from merger.verify.chunked import TableResult

KINDS = {
    "equal": lambda t, s: TableResult(t, s),
    "different": lambda t, s: TableResult(t, s, mismatched_chunks=1),
    "error": lambda t, s: TableResult(t, s, error="no key"),
    "skipped": lambda t, s: TableResult(t, s, skipped=True, note="changelog topics cannot be read by key range"),
}


@given(st.lists(st.sampled_from(sorted(KINDS)), max_size=8))
def test_the_worst_verdict_decides_and_a_skip_is_never_a_success(kinds):
    results = [KINDS[k](f"db.t{i}", "postgres") for i, k in enumerate(kinds)]
    code = exit_code(results)
    if "different" in kinds:
        assert code == EXIT_DIFFERENT
    elif "error" in kinds:
        assert code == EXIT_NOT_VERIFIED
    elif "skipped" in kinds:
        assert code == EXIT_SKIPPED
    else:
        assert code == EXIT_EQUAL
    assert (skipped_line(results) is None) == ("skipped" not in kinds)


def test_the_skipped_line_names_the_sink_the_tables_and_why():
    results = [
        KINDS["equal"]("db.a", "delta"),
        KINDS["skipped"]("db.a", "kafka_changelog"),
        KINDS["skipped"]("db.b", "kafka_changelog"),
    ]
    assert exit_code(results) == EXIT_SKIPPED == 3
    line = skipped_line(results)
    assert "\n" not in line
    assert "kafka_changelog for 2 table(s) (db.a, db.b): changelog topics cannot be read by key range" in line
    assert "--sink" in line
