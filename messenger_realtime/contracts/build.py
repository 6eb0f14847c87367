"""build_events(): a claimed batch's rows become typed events, one domain read per entity.

Synchronous (the domain port is): the dispatcher runs it off the event loop.
"""

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from messenger_realtime.contracts import chat, content, media, people
from messenger_realtime.contracts.base import Contract
from messenger_realtime.contracts.events import HubTarget, OutboxRow, OutgoingEvent
from messenger_realtime.contracts.port import DomainPort
from messenger_realtime.exceptions import InvalidRow, UnencodablePayload
from messenger_realtime.outbox.enums import READ_BY, RealtimeTargetKind, event_name

CONTRACTS: Mapping[str, Contract] = {**chat.CONTRACTS, **people.CONTRACTS, **media.CONTRACTS}


def build_events(
    rows: Sequence[OutboxRow], port: DomainPort, *, versions: bool = True
) -> list[OutgoingEvent | InvalidRow]:
    """One event, or the InvalidRow that quarantines the row, per row and in row order;
    every event's payload is one both hub protocols carry (contracts/content.py), and
    names its stream and offset (`stream`, `offset`) when the row has one.

    Loads every entity the batch refers to with one DomainPort call per entity type,
    and (`versions`) the chats' membership versions, which only a push needs (the hub
    checks a live event's recipients against them; a recovery checked them itself).
    """
    wanted: dict[str, set[UUID]] = defaultdict(set)
    for row in rows:
        reference = getattr(row, CONTRACTS[row.kind].reference)
        if reference is not None and type(port).provides(READ_BY[row.kind]):
            wanted[READ_BY[row.kind]].add(reference)
    loaded: dict[str, Mapping[UUID, Any]] = {
        entity: getattr(port, entity)(refs) for entity, refs in wanted.items()
    }
    # Read after the entities: a version is never older than what the events show.
    chats = {
        row.chat_id
        for row in rows
        if row.target_kind == RealtimeTargetKind.CHAT_GROUP and row.chat_id is not None
    }
    read = port.membership_versions(chats) if chats and versions else {}
    return [_build(row, loaded, read) for row in rows]


def hub_target(row: OutboxRow) -> HubTarget:
    """The group a row is pushed to: chat:{ChatId} or user:{TargetUserId}."""
    if row.target_kind == RealtimeTargetKind.CHAT_GROUP and row.chat_id is not None:
        return HubTarget.chat(row.chat_id)
    if row.target_kind == RealtimeTargetKind.USER and row.target_user_id is not None:
        return HubTarget.user(row.target_user_id)
    raise InvalidRow(f"InvalidTarget: no hub group for target_kind={row.target_kind!r}")


def _build(
    row: OutboxRow, loaded: Mapping[str, Mapping[UUID, Any]], versions: Mapping[UUID, int]
) -> OutgoingEvent | InvalidRow:
    contract = CONTRACTS[row.kind]
    reference = getattr(row, contract.reference)
    try:
        if reference is None:
            raise InvalidRow(f"MissingReference: {row.kind} needs {contract.reference}")
        entity = READ_BY[row.kind]
        if entity not in loaded:  # the port does not provide it (see build_events)
            # Written before the host's port stopped reading it (enqueue refuses it now).
            raise InvalidRow(f"Unsupported: {row.kind} needs DomainPort.{entity}()")
        view = loaded.get(entity, {}).get(reference)
        if view is None:
            raise InvalidRow(f"EntityNotFound: {row.kind} refers to a missing {entity}")
        payload = contract.build(row, view)
        # Content stored before the API checked it (or by another writer) fails here, for
        # this row alone, instead of in an encoder, where it would fail its whole chunk.
        try:
            content.check(payload, "", content.WIRE_LIMITS)
        except content.ContentError as exc:
            raise UnencodablePayload(str(exc)) from None
        target = hub_target(row)
    except InvalidRow as exc:
        return exc
    if row.stream_offset is not None:
        # Its place in the group's stream: what a client recovers from (outbox/streams.py).
        payload["stream"], payload["offset"] = str(target), row.stream_offset
    return OutgoingEvent(
        target,
        event_name(row.kind),
        payload,
        contract.per_recipient,
        membership_version=versions.get(target.id) if target.kind == "chat" else None,
        joins=contract.joins(row, view) if contract.joins is not None else None,
        committed_at=_committed_at(row),
    )


def _committed_at(row: OutboxRow) -> float | None:
    """A claimed row's created_at (dispatch/rows.py) in unix seconds; None for a row a
    Recover reads (hub/recovery.py): only live pushes are measured at the client."""
    created_at = getattr(row, "created_at", None)
    return created_at.timestamp() if created_at is not None else None
