"""The chaos soak's invariant checker (issue 31): what every client received against what
the database committed. Pure: it reads records, never a process or a socket, so it is
tested on its own (tests/unit/test_chaos_checker.py) before any soak trusts it.

Inputs:
- the committed events: (stream, offset) of every outbox row that carries one, from the
  database after the run (the streams' offsets are gapless per stream by construction);
- each stream's members over offsets: a user joined stream S with the event at offset
  `joined` (0: a member from the start) and left it with the event at `left` (None: still
  a member), committed at `left_at` (epoch s). The events committed strictly between are
  owed to the user, but for those the worker read (built) after the user left: the hub
  withholds an event read after a removal committed, by design (its payload is built
  from the current state, which may already hold what the user must not see;
  docs/hub.md, "Membership"), and the user, told by its own stream that it left, can no
  longer read the chat. Those are counted as withheld, not lost (`done_at`: when each
  entry's row ended Done, its read's upper bound). The join's and the leave's own
  events may reach the user on the stream or not (a connection joins the chat's group
  when the hub hears of the join; the user's own stream carries both anyway). A member
  may read the chat's history (the REST API gives it), so an event committed before the
  user joined is no violation; one committed after it left is foreign;
- each client's log, in the order the client saw things: `Got(stream, offset)` for an
  event (live, resumed or recovered), `Told(stream)` when the hub answered a Recover
  with "resync" for it (the client re-reads that stream over REST: everything up to
  then counts as delivered), `Closed(allow_reconnect)` when the hub closed the
  connection, `Connected()` when a new connection was opened.

Invariants (issue 31's numbering):
1. lost: a committed offset owed to the client's user, which the client never got and
   no Told covers;
2. foreign: an offset the client got outside its user's membership of that stream;
3. silent: when a connection ends, a stream has a gap below the highest offset the
   client got (an event skipped while later ones arrived), not covered by a Told, and
   the connection did not end with a Close that allows a reconnect (the hub's word that
   something was dropped: the client recovers). A gap that recovery later filled was
   still silent if nothing told the client; each gap is reported once. A lost event is
   silent too unless a Close allowing a reconnect reached the client after the event was
   committed (`committed_at`): a loss nothing arrived after has no gap to show it;
4. order: within one connection, after dropping duplicates, each stream's offsets
   rise from the moment its `Recover` completed: every event after that is above all
   before it. Before it they may interleave: the live events the hub sent between the
   connection's opening and the client's `Recover` left before the client said where it
   stood, and the recovered ones follow them (docs/hub.md, "Recovery": the client holds
   the early ones ahead of its contiguous offset, as StreamOffsets does). Duplicates are
   counted per client (at-least-once: bounded, not forbidden).

Withheld, by design, not lost: an owed entry read by the worker after the user's removal
committed (the hub re-reads memberships first), or one the client could only recover
(pushed while it had no connection, or before a Close) when its next connection opened
after the user's removal: Recover and REST read the membership when asked, and neither
may give it then.

Late, by the spec, not silent or disorder: an entry whose row took more than one push
(`retried`: its first push failed, or its worker died holding it) may reach a connection
after later entries of its stream, or after the connection ended (the spec: "delivery does
not guarantee order across rows: a row on backoff may go out after one inserted after
it"; the client recovers it by its offset). Such an entry arriving out of order, or
missing from a connection that got later ones, is counted `late`. One pushed once and
still out of order, or missing without a word, is a violation as above.
"""

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Got:
    stream: str
    offset: int


@dataclass(frozen=True)
class Told:
    stream: str
    upto: int


@dataclass(frozen=True)
class Closed:
    allow_reconnect: bool
    at: float | None = None  # epoch s, when the client read the Close


@dataclass(frozen=True)
class Connected:
    at: float | None = None  # epoch s, when the connection opened


@dataclass(frozen=True)
class Recovered:
    """The connection's `Recover` completed (the clients invoke it on every connect)."""


Record = Got | Told | Closed | Connected | Recovered


@dataclass(frozen=True)
class Membership:
    """`user` joined `stream` with its event at `joined` (0: from the start) and left it
    with the one at `left` (None: still a member)."""

    user: str
    stream: str
    joined: int = 0
    left: int | None = None
    left_at: float | None = None

    def owes(self, offset: int) -> bool:
        """Committed while the user was a member: it must reach the user (unless it was
        read after the user left: `withholds`)."""
        return offset > self.joined and (self.left is None or offset < self.left)

    def withholds(self, done_at: float | None) -> bool:
        """An owed entry the worker finished after the user's leave was committed: it was
        read after the removal, and the hub withholds it by design."""
        return self.left_at is not None and done_at is not None and done_at >= self.left_at

    def removed_while_away(self, done_at: float | None, away: list[tuple[float, float]]) -> bool:
        """An owed entry the client could only have got by recovering it, when the user
        was removed before the client could: its first connection after the push opened
        after the removal. Either it had no connection when the entry was pushed, or a
        Close came after the push (the hub's word that something may be lost: a silent
        receive swallows an event). `Recover` and REST read the membership when asked,
        so neither may give it then: withheld by design, not lost. `away`: the spans from
        each Close to the next connection, in order."""
        if self.left_at is None or done_at is None:
            return False
        for _, back in away:
            if back >= done_at:  # the first connection opened after the push
                return back >= self.left_at
        return False

    def admits(self, offset: int) -> bool:
        """It may reach the user: anything up to its leaving (history included)."""
        return self.left is None or offset <= self.left


@dataclass
class Violations:
    lost: list[tuple[str, str, int]] = field(default_factory=list)  # client, stream, offset
    foreign: list[tuple[str, str, int]] = field(default_factory=list)
    silent: list[tuple[str, str, int]] = field(default_factory=list)  # first missing
    disorder: list[tuple[str, str, int]] = field(default_factory=list)  # the late offset
    duplicates: dict[str, int] = field(default_factory=dict)  # client -> count
    withheld: list[tuple[str, str, int]] = field(default_factory=list)  # not violations
    late: list[tuple[str, str, int]] = field(default_factory=list)  # retried: not either

    @property
    def clean(self) -> bool:
        return not (self.lost or self.foreign or self.silent or self.disorder)

    def summary(self) -> dict[str, int]:
        return {
            "lost": len(self.lost),
            "foreign": len(self.foreign),
            "silent": len(self.silent),
            "disorder": len(self.disorder),
            "duplicates": sum(self.duplicates.values()),
            "withheld": len(self.withheld),
            "late": len(self.late),
        }


def check(
    committed: Iterable[tuple[str, int]],
    memberships: Iterable[Membership],
    clients: Mapping[str, tuple[str, Sequence[Record]]],
    done_at: Mapping[tuple[str, int], float] | None = None,
    committed_at: Mapping[tuple[str, int], float] | None = None,
    retried: Collection[tuple[str, int]] = (),
) -> Violations:
    """`clients`: client id -> (its user, its log); `done_at`: (stream, offset) -> when
    its row ended Done, `committed_at`: when it was committed (epoch s); `retried`: the
    entries whose row took more than one push. Every violation names the client, the
    stream and the offset."""
    offsets: dict[str, set[int]] = defaultdict(set)
    for stream, offset in committed:
        offsets[stream].add(offset)
    member_of: dict[tuple[str, str], list[Membership]] = defaultdict(list)
    for membership in memberships:
        member_of[(membership.user, membership.stream)].append(membership)
    found = Violations()
    for client, (user, log) in sorted(clients.items()):
        times = (done_at or {}, committed_at or {})
        _check_client(client, user, log, offsets, member_of, times, set(retried), found)
    return found


def _check_client(
    client: str,
    user: str,
    log: Sequence[Record],
    offsets: Mapping[str, set[int]],
    member_of: Mapping[tuple[str, str], list[Membership]],
    times: tuple[Mapping[tuple[str, int], float], Mapping[tuple[str, int], float]],
    retried: set[tuple[str, int]],
    found: Violations,
) -> None:
    done_at, committed_at = times

    def admitted(stream: str, offset: int) -> bool:
        return any(m.admits(offset) for m in member_of.get((user, stream), ()))

    def owed(stream: str, offset: int) -> bool:
        done = done_at.get((stream, offset))
        return any(
            m.owes(offset) and not m.withholds(done) for m in member_of.get((user, stream), ())
        )

    got: dict[str, set[int]] = defaultdict(set)
    told: dict[str, int] = {}  # stream -> the highest offset a Told covers
    duplicates = 0
    connection: dict[str, list[int]] = defaultdict(list)  # this connection's offsets
    ordered_from: dict[str, int] | None = None  # per stream: where its ordered part starts
    reported: set[tuple[str, int]] = set()

    def end_connection(excused: bool) -> None:
        nonlocal ordered_from
        for stream, seen in connection.items():
            start = len(seen) if ordered_from is None else ordered_from.get(stream, 0)
            _check_order(client, stream, seen, start, retried, found)
            if excused:
                continue
            have = got[stream]
            for offset in range(min(have), max(have)):
                skipped = offset not in have and offset > told.get(stream, 0)
                skipped = skipped and owed(stream, offset)
                if skipped and (stream, offset) not in reported:
                    reported.add((stream, offset))
                    late = (stream, offset) in retried  # on backoff, not dropped
                    (found.late if late else found.silent).append((client, stream, offset))
        connection.clear()
        ordered_from = None

    for record in log:
        if isinstance(record, Got):
            if record.offset in got[record.stream]:
                duplicates += 1
            got[record.stream].add(record.offset)
            connection[record.stream].append(record.offset)
            if not admitted(record.stream, record.offset):
                found.foreign.append((client, record.stream, record.offset))
        elif isinstance(record, Told):
            # The client loaded the stream over REST: what it held up to `upto` is its.
            told[record.stream] = max(told.get(record.stream, 0), record.upto)
        elif isinstance(record, Closed):
            end_connection(excused=record.allow_reconnect)
        elif isinstance(record, Connected):
            end_connection(excused=False)  # the socket dropped: no word from the hub
        elif isinstance(record, Recovered) and ordered_from is None:
            ordered_from = {stream: len(seen) for stream, seen in connection.items()}
    end_connection(excused=False)
    found.duplicates[client] = duplicates
    closes = [r.at for r in log if isinstance(r, Closed) and r.allow_reconnect and r.at]
    away = _away(log)
    for (who, stream), spans in member_of.items():
        if who != user:
            continue
        for offset in sorted(offsets.get(stream, ())):
            if offset in got[stream] or offset <= told.get(stream, 0):
                continue
            done = done_at.get((stream, offset))
            if any(
                m.owes(offset) and not m.withholds(done) and not m.removed_while_away(done, away)
                for m in spans
            ):
                found.lost.append((client, stream, offset))
                committed = committed_at.get((stream, offset))
                told_after = committed is not None and any(at >= committed for at in closes)
                if committed is not None and not told_after and (stream, offset) not in reported:
                    reported.add((stream, offset))
                    found.silent.append((client, stream, offset))
            elif any(m.owes(offset) for m in spans):
                found.withheld.append((client, stream, offset))


def _away(log: Sequence[Record]) -> list[tuple[float, float]]:
    """The spans the client had no connection: from each Close to the next connection."""
    spans, gone = [], None
    for record in log:
        if isinstance(record, Closed) and record.at is not None:
            gone = record.at
        elif isinstance(record, Connected) and record.at is not None and gone is not None:
            spans.append((gone, record.at))
            gone = None
    return spans


def _check_order(
    client: str,
    stream: str,
    seen: list[int],
    start: int,
    retried: set[tuple[str, int]],
    found: Violations,
) -> None:
    """One connection's offsets of one stream, in arrival order: from index `start` (its
    Recover's completion) on, each new offset is above every one before it, but for an
    entry whose row was retried (late, by the spec)."""
    highest = max(seen[:start], default=0)
    distinct = set(seen[:start])
    for offset in seen[start:]:
        if offset in distinct:
            continue
        if offset < highest:
            late = (stream, offset) in retried
            (found.late if late else found.disorder).append((client, stream, offset))
        distinct.add(offset)
        highest = max(highest, offset)
