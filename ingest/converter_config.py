"""Debezium's value-mapping options (decimal, bigint unsigned, time precision, binary
handling, the time adjuster), as the connector configuration names them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class ConverterConfig:
    """Debezium's value-mapping options (names as in the connector configuration)."""

    decimal_handling_mode: str = "precise"  # precise | string | double
    bigint_unsigned_handling_mode: str = "long"  # long | precise
    time_precision_mode: str = "adaptive_time_microseconds"  # or connect
    binary_handling_mode: str = "bytes"  # bytes | base64 | base64-url-safe | hex
    enable_time_adjuster: bool = True
    #: undo mysql-replication 1.0.x's decoding of negative TIME values with a fraction
    #: (it returns -(S + 1 - f) for -(S + f)); turn off if the reader decodes TIME2 itself
    fix_negative_time_fraction: bool = True

    def __post_init__(self) -> None:
        checks = {
            "decimal_handling_mode": ("precise", "string", "double"),
            "bigint_unsigned_handling_mode": ("long", "precise"),
            "time_precision_mode": ("adaptive_time_microseconds", "connect"),
            "binary_handling_mode": ("bytes", "base64", "base64-url-safe", "hex"),
        }
        for attr, allowed in checks.items():
            if getattr(self, attr) not in allowed:
                raise ValueError(f"{attr.replace('_', '.')}={getattr(self, attr)!r}: expected one of {allowed}")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> "ConverterConfig":
        """From Debezium-style properties ('decimal.handling.mode', ...)."""
        kw = {}
        for f in (
            "decimal_handling_mode",
            "bigint_unsigned_handling_mode",
            "time_precision_mode",
            "binary_handling_mode",
        ):
            key = f.replace("_", ".")
            if key in props:
                kw[f] = str(props[key]).lower()
        if "enable.time.adjuster" in props:
            kw["enable_time_adjuster"] = str(props["enable.time.adjuster"]).lower() == "true"
        return cls(**kw)
