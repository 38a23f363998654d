"""A broker outage as the ``cdc_kafka`` source sees it: since when, how many attempts, and
whether ``kafka.outage_max_s`` has passed. Only the bookkeeping and the lines that say so;
the callers do the Kafka calls. Policy: docs/operations/faults.md, "The Kafka broker is
unreachable"."""

from __future__ import annotations

from dataclasses import dataclass

from merger.kafka.options import KafkaSourceError


@dataclass
class BrokerOutage:
    max_s: float  # 0: no bound, wait for as long as it takes (and keep saying so)
    what: str = "no new micro-batch until it answers"
    since: float | None = None
    attempts: int = 0

    def failed(self, error: str, now: float, started: float | None = None) -> str:
        """One more failed attempt (``started``: when the attempt that failed began): the line to
        log, or KafkaSourceError once the bound passed."""
        if self.since is None:
            self.since = now if started is None else started
        self.attempts += 1
        waited = now - self.since
        if self.max_s and waited >= self.max_s:
            raise KafkaSourceError(
                f"Kafka broker unreachable for {waited:.0f}s, longer than kafka.outage_max_s ({self.max_s:.0f}s): "
                f"{error}. Check the broker; started again, the merger goes on from its checkpoint"
            )
        return f"Kafka broker unreachable for {waited:.0f}s ({error}), attempt {self.attempts}: {self.what}"

    def recovered(self, now: float) -> str | None:
        """The line to log when the broker answers again after an outage (None if there was none)."""
        if self.since is None:
            return None
        line = f"Kafka broker reachable again after {now - self.since:.0f}s ({self.attempts} failed attempts)"
        self.since, self.attempts = None, 0
        return line
