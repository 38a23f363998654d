"""Which topics the merger's checkpoint offsets belong to: Kafka topic ids, recorded when the
source first reads a topic and compared on later reads (at the first planning, every
``CHECK_EVERY_S``, and whenever a partition's end is below the offset already read).

A topic deleted and created again under its name has a new id, and its offsets start at 0
again: the checkpoint's offsets would read nothing until the new topic outgrew them, and
then skip its first records. The source stops with one line instead."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

from merger.kafka.options import KafkaSourceError

CHECK_EVERY_S = 30.0


def changed_topics(recorded: Mapping[str, str], current: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(topic, recorded id, current id) of each topic whose id changed, by name."""
    return sorted((t, recorded[t], i) for t, i in current.items() if t in recorded and i and recorded[t] != i)


def recreated_message(changed: list[tuple[str, str, str]]) -> str:
    topic, old, new = changed[0]
    more = f" (and {len(changed) - 1} more topics)" if len(changed) > 1 else ""
    return (
        f"topic {topic} was deleted and created again since the merger read it (topic id {old}, now {new}){more}: "
        f"the merger's checkpoint holds offsets of the old topic, and reading the new one from them would skip its "
        f"first records. Start the merger with a new state_dir (every table is snapshotted again into its sink "
        f"tables), or give the old topic back"
    )


class TopicIdentities:
    """The recorded ids (a JSON file in the merger's state_dir; none: kept in memory only)."""

    def __init__(self, path: str | None):
        self.path = path
        self.recorded: dict[str, str] = {}
        self.last_check: float | None = None
        if path:
            try:
                with open(path) as f:
                    self.recorded = {str(t): str(i) for t, i in json.load(f).items()}
            except FileNotFoundError:
                pass
            except (OSError, ValueError, AttributeError) as exc:
                raise KafkaSourceError(f"cannot read the recorded topic ids in {path}: {exc}") from None

    def due(self, now: float, topics: Iterable[str], below: Iterable[str] = ()) -> tuple[list[str], bool]:
        """The topics to ask the broker for the ids of now, and whether that is the check
        of all of them: every topic at the first planning and every ``CHECK_EVERY_S``, in
        between the topics not recorded yet and ``below`` (a partition's end below the
        offset read). Asking for all 500 topics whenever one end was below (the local
        broker's end lags the last record batch) cost every trigger ~15 ms (issue 23)."""
        topics = sorted(set(topics))
        if self.all_due(now):
            return topics, True
        return sorted({t for t in topics if t not in self.recorded} | set(below)), False

    def all_due(self, now: float) -> bool:
        """Whether the check of every topic is due."""
        return self.last_check is None or now - self.last_check >= CHECK_EVERY_S

    def check(self, now: float, current: Mapping[str, str], everything: bool = True) -> None:
        """Raise KafkaSourceError if a topic's id changed; record the ids of new topics.
        ``everything``: ``current`` holds every topic read (restarts the periodic check)."""
        changed = changed_topics(self.recorded, current)
        if changed:
            raise KafkaSourceError(recreated_message(changed))
        if everything:
            self.last_check = now
        new = {t: i for t, i in current.items() if i and t not in self.recorded}
        if new:
            self.recorded.update(new)
            self._save()

    def _save(self) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.recorded, f, sort_keys=True)
        os.replace(tmp, self.path)
