"""Transaction control in the binlog: savepoints (as ORMs write them), ROLLBACK TO that
MariaDB leaves in the binlog, XA transactions. Unit tests of the classifier, then ingest
end to end on the real MariaDB and broker: the topics rebuild the source exactly."""

from __future__ import annotations

import pytest

from ingest import statements as st


@pytest.mark.parametrize(
    "query,kind,name",
    [
        ("BEGIN", st.BEGIN, None),
        ("begin work", st.BEGIN, None),
        ("START TRANSACTION", st.BEGIN, None),
        ("START TRANSACTION WITH CONSISTENT SNAPSHOT", st.BEGIN, None),
        ("COMMIT", st.COMMIT, None),
        ("commit;", st.COMMIT, None),
        ("ROLLBACK", st.ROLLBACK, None),
        ("SAVEPOINT `s1`", st.SAVEPOINT, "s1"),
        ("savepoint s2", st.SAVEPOINT, "s2"),
        ("SAVEPOINT `a``b`", st.SAVEPOINT, "a`b"),
        ("ROLLBACK TO `q`", st.ROLLBACK_TO, "q"),
        ("ROLLBACK TO SAVEPOINT q", st.ROLLBACK_TO, "q"),
        ("rollback work to savepoint `django_1`", st.ROLLBACK_TO, "django_1"),
        ("RELEASE SAVEPOINT `s2`", st.RELEASE, "s2"),
        ("XA START X'7831',X'',1", st.XA_START, "X'7831',X'',1"),
        ("XA END X'7831',X'',1", st.XA_END, "X'7831',X'',1"),
        ("XA PREPARE X'7831',X'',1", st.XA_PREPARE, "X'7831',X'',1"),
        ("XA COMMIT X'7831',X'',1", st.XA_COMMIT, "X'7831',X'',1"),
        ("XA ROLLBACK X'7832',X'',1", st.XA_ROLLBACK, "X'7832',X'',1"),
        ("/* app */ SAVEPOINT x", st.SAVEPOINT, "x"),
        ("ALTER TABLE t ADD COLUMN c INT", st.STATEMENT, None),
        ("CREATE TABLE savepoints (id INT)", st.STATEMENT, None),
        ("ROLLBACK_LOG_TRUNCATE", st.STATEMENT, None),
        ("COMMITTED_TABLE", st.STATEMENT, None),
        ("DROP TABLE `rollback`", st.STATEMENT, None),
    ],
)
def test_classify(query, kind, name):
    stmt = st.classify(query)
    assert (stmt.kind, stmt.name) == (kind, name)


def test_which_statements_end_a_group():
    assert [
        k
        for k in (
            st.BEGIN,
            st.COMMIT,
            st.ROLLBACK,
            st.SAVEPOINT,
            st.ROLLBACK_TO,
            st.RELEASE,
            st.XA_START,
            st.XA_END,
            st.XA_PREPARE,
            st.XA_COMMIT,
            st.XA_ROLLBACK,
            st.STATEMENT,
        )
        if st.Statement(k).ends_group
    ] == [st.COMMIT, st.ROLLBACK, st.XA_PREPARE, st.XA_COMMIT, st.XA_ROLLBACK]
    one = st.classify("XA COMMIT 'x' ONE PHASE")
    assert (one.kind, one.name, one.one_phase) == (st.XA_COMMIT, "'x'", True)
