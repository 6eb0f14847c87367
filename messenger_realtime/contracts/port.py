"""The domain port: everything the realtime app reads from the host's messenger domain.

The app never imports the host's models. The host implements DomainPort and names the
class in settings.MESSENGER_REALTIME["DOMAIN_PORT"]. Methods are synchronous (the worker
and the hub call them through sync_to_async) and batch-shaped where the dispatcher needs
them: one call per entity type per claimed batch, never one query per row.

Views are plain frozen dataclasses of ids, states and times. Only MessageView carries
content (body, file metadata, card text), and only chat-group events may include it.
Content is the user's, carried as stored (contracts/content.py says what the build
accepts); a value the port cannot read is returned as content.Unreadable, never raised.
"""

import abc
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any
from uuid import UUID

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from messenger_realtime.conf.settings import domain_port_path
from messenger_realtime.contracts.content import Unreadable


@dataclass(frozen=True)
class MessageView:
    id: UUID
    chat_id: UUID
    seq: int
    sender_user_id: UUID | None
    kind: str  # Text, File or Card
    sent_at: datetime
    body: str
    # Unreadable: a stored value the port could not read (the row then fails alone)
    file_meta: dict[str, Any] | Unreadable | None
    card_text: str
    edited_at: datetime | None
    deleted_at: datetime | None


@dataclass(frozen=True)
class ParticipantView:
    id: UUID
    chat_id: UUID
    user_id: UUID
    is_active: bool
    last_read_seq: int


@dataclass(frozen=True)
class ChatEventView:
    id: UUID
    chat_id: UUID
    kind: str  # ChatCreated, ParticipantAdded, ParticipantRemoved, TitleChanged
    actor_user_id: UUID | None
    subject_user_id: UUID | None
    title: str
    created_at: datetime


@dataclass(frozen=True)
class ContactView:
    id: UUID
    requester_user_id: UUID
    addressee_user_id: UUID
    status: str  # Pending, Accepted, Removed
    updated_at: datetime


@dataclass(frozen=True)
class BlacklistView:
    id: UUID
    owner_user_id: UUID
    blocked_user_id: UUID
    is_active: bool
    updated_at: datetime


@dataclass(frozen=True)
class CallView:
    id: UUID
    session_kind: str  # Direct or Conference
    chat_id: UUID
    room_name: str
    status: str  # Ringing, Active, Declined, Missed, Cancelled, Ended
    initiator_user_id: UUID
    callee_user_id: UUID | None
    invited_user_id: UUID | None
    ended_by_user_id: UUID | None
    created_at: datetime
    answered_at: datetime | None
    ended_at: datetime | None


@dataclass(frozen=True)
class CallParticipantView:
    id: UUID
    call: CallView
    user_id: UUID
    joined_at: datetime
    left_at: datetime | None
    screen_sharing: bool


@dataclass(frozen=True)
class RecordingView:
    id: UUID
    call: CallView
    status: str  # Recording, Stopped, Available, Failed
    started_by_user_id: UUID
    file_url: str
    failure_code: str
    started_at: datetime
    stopped_at: datetime | None


Ids = Collection[UUID]


@dataclass(frozen=True)
class ChatRoster:
    """A chat's active members and its membership version, read in one snapshot."""

    version: int
    members: frozenset[UUID]


@dataclass(frozen=True)
class UserStanding:
    """Whether a user may connect, and since when their credentials hold.

    active: a known, active user; revoked_at: unix time before which every credential
    issued to them (a token's `iat`, a Django session's login) is refused: set when they
    are deactivated, change their password or log out everywhere. None: never revoked.
    """

    active: bool
    revoked_at: float | None = None


class DomainPort(abc.ABC):
    """What the realtime app reads. Batch methods return only the ids that exist.

    A host implements the abstract methods (its users' chats and memberships, messages,
    participants, chat events). The rest have defaults: chat_roster, user_standing and
    standing_and_chats read more cheaply when a host overrides them; contacts,
    blacklist_entries, calls, call_participants and recordings are optional capabilities
    (OPTIONAL_READS): a host that has no calls implements none of those, sets no media
    secret, and may not write their kinds (outbox.enqueue refuses them, naming the
    method). `provides()` says which a port class implements.
    """

    OPTIONAL_READS = frozenset(
        {"contacts", "blacklist_entries", "calls", "call_participants", "recordings"}
    )

    @classmethod
    def provides(cls, method: str) -> bool:
        """Whether this port implements `method` (an optional read is implemented when
        the class overrides DomainPort's default)."""
        found = getattr(cls, method, None)
        return callable(found) and found is not getattr(DomainPort, method, None)

    def active_chat_ids(self, user_id: UUID) -> list[UUID]:
        """Chats in which the user is an active participant (their hub chat groups).
        This default reads active_chats."""
        return list(self.active_chats(user_id))

    @abc.abstractmethod
    def active_chats(self, user_id: UUID) -> Mapping[UUID, int]:
        """The chats in which the user is an active participant, each with its chat's
        membership version, read together."""

    @abc.abstractmethod
    def membership_versions(self, chat_ids: Ids) -> Mapping[UUID, int]:
        """Each chat's membership version: a number the host raises in the same
        transaction as every participant it adds or removes (never lowers)."""

    @abc.abstractmethod
    def user_exists(self, user_id: UUID) -> bool:
        """Whether a token's subject is a known, active user."""

    def chat_roster(self, chat_id: UUID) -> ChatRoster | None:
        """The chat's active members and membership version, read together (the hub
        reads it once per process when the version moves: hub/rosters.py). None: the
        chat does not exist, or this port cannot tell (the default); each connection
        then re-reads its own memberships."""
        return None

    def user_standing(self, user_id: UUID) -> UserStanding:
        """The user's standing, read in one go at every negotiate, upgrade and REST call.
        A host that can revoke credentials overrides it; this default never does."""
        return UserStanding(self.user_exists(user_id))

    def standing_and_chats(self, user_id: UUID) -> tuple[UserStanding, Mapping[UUID, int]]:
        """user_standing and active_chats together: what the hub reads when a connection
        opens. A host reads both in one statement (one round trip, one snapshot); this
        default reads each."""
        return self.user_standing(user_id), self.active_chats(user_id)

    @abc.abstractmethod
    def messages(self, ids: Ids) -> Mapping[UUID, MessageView]:
        """The messages of these ids (deleted ones too, with deleted_at): the Message*
        kinds' rows refer to them by message_id. One call per claimed batch."""

    @abc.abstractmethod
    def participants(self, ids: Ids) -> Mapping[UUID, ParticipantView]:
        """The participations of these ids (ReadReceiptUpdated rows refer to them)."""

    @abc.abstractmethod
    def chat_events(self, ids: Ids) -> Mapping[UUID, ChatEventView]:
        """The chat events of these ids (ChatUpdated rows: created, renamed, members)."""

    # Optional capabilities: a host without them leaves these as they are.

    def contacts(self, ids: Ids) -> Mapping[UUID, ContactView]:
        """The contact requests of these ids (the Contact* kinds)."""
        raise NotProvided("contacts")

    def blacklist_entries(self, ids: Ids) -> Mapping[UUID, BlacklistView]:
        """The block entries of these ids (BlacklistChanged)."""
        raise NotProvided("blacklist_entries")

    def calls(self, ids: Ids) -> Mapping[UUID, CallView]:
        """The calls and conferences of these ids (the Call* and Conference* kinds)."""
        raise NotProvided("calls")

    def call_participants(self, ids: Ids) -> Mapping[UUID, CallParticipantView]:
        """The call participations of these ids, each with its call (participants
        joining and leaving, screen sharing)."""
        raise NotProvided("call_participants")

    def recordings(self, ids: Ids) -> Mapping[UUID, RecordingView]:
        """The recordings of these ids, each with its call (the Recording* kinds)."""
        raise NotProvided("recordings")

    # Presence and typing (hub/presence/, hub/connection/methods/): live state, never in
    # the outbox. Optional too: without visible_users nobody may watch anyone's presence.

    def visible_users(self, viewer_id: UUID, user_ids: Ids) -> Collection[UUID]:
        """Which of `user_ids` the viewer may see online and last seen. Presence is by
        consent: sharing a chat grants it only once the watched user took part in that
        chat (created it, sent a message in it, or accepted it, as the host's domain
        says), since anyone may open a direct chat with anyone; an accepted contact grants
        it too; a block either way never. (The project's rule: realtime_port.py.) Read
        once per WatchPresence call, for at most PRESENCE_WATCH_MAX users."""
        raise NotProvided("visible_users")

    def viewers_of(self, user_id: UUID, viewer_ids: Ids) -> Collection[UUID]:
        """Which of `viewer_ids` may still see `user_id` online and last seen (the other
        way round from visible_users): read when a watched user's presence changes, for
        the watchers whose last check is over a minute old (hub/presence/visibility.py),
        once per change and hub process, so that a block or a leave ends a watch. This default
        asks visible_users once per viewer; a host answers in one read (the project's).
        Not visible_users(user_id, viewer_ids): the consent is the watched user's, so
        the rule is not symmetric."""
        return [v for v in viewer_ids if user_id in self.visible_users(v, [user_id])]

    def users_blocking(self, user_id: UUID) -> Collection[UUID]:
        """The users who blocked `user_id`: its typing is not shown to them. Read at most
        once a minute per connection that types. This default: nobody."""
        return ()

    def last_seen(self, user_ids: Ids) -> Mapping[UUID, float]:
        """When each user was last online (unix seconds), as record_last_seen stored it;
        read only for users Redis has no time for (after a restart of it). This default:
        none known."""
        return {}

    def record_last_seen(self, seen: Mapping[UUID, float]) -> None:
        """Store when each user was last online (unix seconds), keeping the later of the
        stored and the given time. Called in batches, never per connect."""
        raise NotProvided("record_last_seen")


class NotProvided(NotImplementedError):
    """An optional read the host's port does not implement (DomainPort.OPTIONAL_READS)."""

    def __init__(self, method: str) -> None:
        super().__init__(f"the DomainPort does not implement {method}()")
        self.method = method


def port_problem(path: str) -> str | None:
    """Why a dotted path cannot serve as the DomainPort, or None when it can."""
    if not path.strip():
        return "must name the host's DomainPort class (dotted path)"
    try:
        port_class = import_string(path)
    except ImportError as exc:
        return f"cannot import {path!r}: {exc}"
    abstract = DomainPort.__abstractmethods__
    missing = [
        name
        for name in abstract
        if not callable(found := getattr(port_class, name, None))
        or getattr(found, "__isabstractmethod__", False)
    ]
    return f"{path} lacks {', '.join(sorted(missing))}" if missing else None


@cache
def get_domain_port() -> DomainPort:
    """The configured port, one instance per process.

    Raises ImproperlyConfigured when DOMAIN_PORT cannot serve (system check E011).
    """
    path = domain_port_path()
    problem = port_problem(path)
    if problem is not None:
        raise ImproperlyConfigured(f"MESSENGER_REALTIME DOMAIN_PORT: {problem}")
    port: DomainPort = import_string(path)()
    return port
