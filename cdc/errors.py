"""The exceptions whose message is meant for the user (printed as one line, exit 2)."""

from cdc.config import ConfigError
from cdc.stack import StackError


def _user_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ConfigError, StackError]
    try:
        from ingest.checks import SourceError
        from ingest.errors import IngestError
        from ingest.producer import BrokerError

        errors += [IngestError, SourceError, BrokerError]
    except ImportError:  # pragma: no cover - partial installs
        pass
    from cdc.demo import DemoError

    errors.append(DemoError)
    try:
        from merger.errors import MergerError

        errors.append(MergerError)
    except ImportError:
        pass
    return tuple(errors)


USER_ERRORS = _user_errors()
