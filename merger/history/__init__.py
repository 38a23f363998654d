"""History tables of a captured table, as plain Python (issue 27): SCD type 2 versions
(``scd2``) and an append-only change log (``changelog``) of the changes the merger applies
(``change``). No I/O: a sink adapter applies what these return as a few row operations."""
