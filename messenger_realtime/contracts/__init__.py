"""Typed RealtimeMessage contracts: one per RealtimeDispatchKind, built at delivery.

build_events() loads every entity a claimed batch refers to with one DomainPort call per
entity type, then builds each row's event, or the InvalidRow that quarantines it.
"""

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from messenger_realtime.contracts import chat, media, people
from messenger_realtime.contracts.base import Contract
from messenger_realtime.contracts.events import InvalidRow, OutgoingEvent
from messenger_realtime.contracts.port import DomainPort
from messenger_realtime.dispatch.store import ClaimedRow
from messenger_realtime.outbox.enums import event_name
from messenger_realtime.transport.groups import target_group

CONTRACTS: Mapping[str, Contract] = {**chat.CONTRACTS, **people.CONTRACTS, **media.CONTRACTS}


def build_events(rows: Sequence[ClaimedRow], port: DomainPort) -> list[OutgoingEvent | InvalidRow]:
    """One result per row, in order (synchronous: run it off the event loop)."""
    wanted: dict[str, set[UUID]] = defaultdict(set)
    for row in rows:
        contract = CONTRACTS[row.kind]
        reference = getattr(row, contract.reference)
        if reference is not None:
            wanted[contract.entity].add(reference)
    loaded: dict[str, Mapping[UUID, Any]] = {
        entity: getattr(port, entity)(refs) for entity, refs in wanted.items()
    }
    return [_build(row, loaded) for row in rows]


def _build(row: ClaimedRow, loaded: Mapping[str, Mapping[UUID, Any]]) -> OutgoingEvent | InvalidRow:
    contract = CONTRACTS[row.kind]
    reference = getattr(row, contract.reference)
    try:
        if reference is None:
            raise InvalidRow(f"MissingReference: {row.kind} needs {contract.reference}")
        view = loaded.get(contract.entity, {}).get(reference)
        if view is None:
            raise InvalidRow(f"EntityNotFound: {row.kind} refers to a missing {contract.entity}")
        payload = contract.build(row, view)
        group = target_group(row.target_kind, row.chat_id, row.target_user_id)
    except InvalidRow as exc:
        return exc
    return OutgoingEvent(group, event_name(row.kind), payload)
