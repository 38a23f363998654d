"""How the PostgreSQL sink reaches its server."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping


@dataclass
class PgSettings:
    """Connection settings; the password never appears in repr() or messages."""

    host: str = "127.0.0.1"
    port: int = 5432
    user: str = "postgres"
    password: str = field(default="", repr=False)
    dbname: str = "postgres"
    connect_timeout: int = 10
    application_name: str = "cdc-merger"

    @classmethod
    def from_any(cls, value: "PgSettings | Mapping[str, Any] | Any") -> "PgSettings":
        if isinstance(value, PgSettings):
            return value
        if isinstance(value, Mapping):
            d = dict(value)
        else:  # e.g. cdc.stack.PostgresInfo
            d = {
                k: getattr(value, k)
                for k in ("host", "port", "user", "password", "dbname", "database")
                if hasattr(value, k)
            }
        if "database" in d and "dbname" not in d:
            d["dbname"] = d["database"]
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def where(self) -> str:
        return f"PostgreSQL at {self.host}:{self.port} (database {self.dbname!r}, user {self.user!r})"
