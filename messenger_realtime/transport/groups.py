"""Hub group naming: logical spec names and the Channels layer names they map to.

The spec speaks of `chat:{ChatId}` and `user:{UserId}`; Channels group names allow only
[a-zA-Z0-9._-] (and < 100 chars), so ':' becomes '.' here, in one place.
"""

from uuid import UUID

from messenger_realtime.outbox.enums import RealtimeTargetKind


def chat_group(chat_id: UUID | str) -> str:
    return f"chat:{chat_id}"


def user_group(user_id: UUID | str) -> str:
    return f"user:{user_id}"


def layer_group(logical: str) -> str:
    """The Channels layer group for a logical hub group (chat:{id} -> chat.{id})."""
    prefix, sep, ident = logical.partition(":")
    if not sep or prefix not in ("chat", "user") or not ident:
        raise ValueError(f"not a hub group: {logical!r}")
    return f"{prefix}.{UUID(ident)}"


def target_group(target_kind: str, chat_id: UUID | None, target_user_id: UUID | None) -> str:
    """The logical group an outbox row is pushed to."""
    if target_kind == RealtimeTargetKind.CHAT_GROUP and chat_id is not None:
        return chat_group(chat_id)
    if target_kind == RealtimeTargetKind.USER and target_user_id is not None:
        return user_group(target_user_id)
    raise ValueError(f"no group for target_kind={target_kind!r}")
