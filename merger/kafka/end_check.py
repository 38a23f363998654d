"""Which partitions' ends the ``cdc_kafka`` source asks the broker for on a trigger (pure:
no broker here).

Without news of which topics moved, every partition's end, on every trigger: one
ListOffsets request of 1,500 partitions, 5 times a second, at 500 tables (issue 23). With
the moved-topics feed (``cdc.wire.moved_topics``: each ingest transaction's position record
names the topics it wrote), only the partitions of those topics, plus every partition
whose end is unknown and those the scan probe has not settled; every partition again
every ``every_s`` seconds, when the feed cannot tell (it just started, a record of an
older ingest, an error), and after a failed request.

A committed record is therefore asked for within ``every_s`` at the latest, whoever wrote
it. A topic stays *hot* for ``hot_s`` after it was named: its partitions are asked on every
trigger meanwhile, so a transaction whose commit reached the offsets topic before the
topic's own partitions (the markers of one commit land partition by partition) is read at
the next trigger, not at the next full check."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from merger.kafka.limits import TP

HOT_S = 2.0
FOLLOW_S = 30.0  # the scan probe keeps following a partition this long after its end last moved


class EndCheck:
    def __init__(self, every_s: float | None, hot_s: float = HOT_S) -> None:
        """``every_s``: seconds between checks of every partition; None: every trigger
        (no feed)."""
        self.every_s = every_s
        self.hot_s = hot_s
        self.last_all: float | None = None  # when every partition was last answered
        self.hot: dict[str, float] = {}  # topic -> until when its partitions are asked
        self.moved_at: dict[TP, float] = {}  # partition -> when its end was last seen moving

    def plan(
        self,
        now: float,
        current: Sequence[TP],
        moved: Collection[str] | None,
        known_ends: Mapping[TP, int],
        unsettled: Collection[TP] = (),
    ) -> tuple[list[TP], bool]:
        """The partitions of ``current`` to ask the end of, and whether that is all of them.
        ``moved``: the topics named as moved since the last plan; None: unknown (any may
        have)."""
        for topic in moved or ():
            self.hot[topic] = now + self.hot_s
        self.hot = {t: until for t, until in self.hot.items() if until > now}
        if moved is None or self.every_s is None or self.last_all is None or now - self.last_all >= self.every_s:
            return list(current), True
        ask = [tp for tp in current if tp[0] in self.hot or tp not in known_ends or tp in unsettled]
        return ask, len(ask) == len(current)

    def all_due(self, now: float) -> bool:
        """With the feed: whether the next plan asks for every partition because the last
        full check is ``every_s`` old (the source refreshes its metadata then too, so the
        two share one trigger)."""
        return self.every_s is not None and (self.last_all is None or now - self.last_all >= self.every_s)

    def quiet(self, now: float) -> bool:
        """Whether a plan now would ask nothing for want of news: the feed is followed, the
        check of every partition is not due, no topic is hot (the other reasons to ask
        are the caller's: a named topic, an unknown end, an unsettled scan)."""
        if self.every_s is None or self.all_due(now):
            return False
        return all(until <= now for until in self.hot.values())

    def answered(self, now: float, everything: bool) -> None:
        """The broker answered the plan's request (``everything``: of every partition)."""
        if everything:
            self.last_all = now

    def failed(self) -> None:
        """The request failed (the broker did not answer): what moved meanwhile is not
        known, so the next plan asks for every partition."""
        self.last_all = None

    def followed(
        self, now: float, current: Sequence[TP], before: Mapping[TP, int], answers: Mapping[TP, int]
    ) -> list[TP]:
        """The partitions the scan probe follows (stays assigned to, reads the tails of): with
        the feed, those whose end moved (``answers`` against the ends known ``before``; none
        known: moved), or whose topic is hot, in the last ``FOLLOW_S`` seconds; without
        it, every partition. A consumer assigned to 1,500 partitions kept the local broker
        fetching all of them every 10 ms (a core at 500 idle tables) and answered the busy
        ones late. An end of 0 (the local broker's read_committed end while a transaction
        is open on the partition) moved only when it differs from the last: counted as
        moved every time, it kept one partition of the schema-change topic followed for
        good, and its fetches, 100 a second, doubled an idle merger's CPU. What a
        transaction of ingest commits there is named by the feed (hot: followed again);
        the next full check sees any other end change."""
        if self.every_s is None:
            return list(current)
        for tp, end in answers.items():
            if before.get(tp) != end:
                self.moved_at[tp] = now
        for tp in current:
            if self.hot.get(tp[0], now) > now:
                self.moved_at[tp] = now
        self.moved_at = {tp: t for tp, t in self.moved_at.items() if now - t < FOLLOW_S}
        return [tp for tp in current if tp in self.moved_at]
