"""Key columns that Arrow groups and joins exactly as Python compares them (pure)."""

from __future__ import annotations

import pyarrow as pa


def same_keys_by_arrow_and_python(t: pa.DataType) -> bool:
    """Whether two values of type ``t`` are one key for Arrow's grouping exactly when they
    are equal in Python (what the history models group by). Not floats: 0.0 and -0.0 are
    one key in Python, two for a hash of their bits."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_decimal(t)
        or pa.types.is_date(t)
        or pa.types.is_boolean(t)
    )
