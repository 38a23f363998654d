"""User-facing merger errors (printed as one line by the CLI)."""

from cdc.errors import CdcError, UserError


class MergerError(UserError, RuntimeError):
    pass


class BadChange(CdcError):
    """A change of a known table that cannot be applied (``on_bad_record: pause``)."""


class BadRecord(ValueError):
    """A Kafka record that cannot be parsed into a change (its value, headers or position)."""
