"""The error root of the project, the bottom layer every package may import.

* ``CdcError``: every exception the project defines derives from it.
* ``UserError``: a message meant for the user (bad configuration, an unreachable or
  misconfigured server, a table that needs an operator): the CLI prints it as one line
  and exits 2, never a stack trace.

Each class keeps its standard base too (``ValueError``, ``RuntimeError``...), so code
catching those catches them as before.
"""


class CdcError(Exception):
    """Root of the project's exceptions."""


class UserError(CdcError):
    """A one-line message for the user (printed by the CLI, exit 2)."""


class BrokerError(UserError, RuntimeError):
    """The Kafka broker is unreachable or refused something; the message is user-facing."""


USER_ERRORS = (UserError,)
