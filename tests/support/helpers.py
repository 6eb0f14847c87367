"""Test helpers that talk to the real database and the real channel layer."""

import asyncio
from typing import Any
from uuid import UUID, uuid4

from channels_redis.core import RedisChannelLayer
from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from messenger_realtime import outbox
from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.backplane.layer import BatchReceiveRedisChannelLayer
from messenger_realtime.conf.settings import RealtimeDispatchOptions, load_options
from messenger_realtime.contracts.events import HubTarget, OutgoingEvent
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeDispatchKind, RealtimeTargetKind
from project.messenger.models import Message


def options(**overrides: Any) -> RealtimeDispatchOptions:
    return load_options(**overrides)


def commit_message_received(message: Message) -> RealtimeOutboxEntry:
    """The owner's MessageReceived write for `message`: enqueue, committed, with its NOTIFY."""
    with transaction.atomic():
        return outbox.enqueue(
            RealtimeDispatchKind.MESSAGE_RECEIVED,
            target_kind=RealtimeTargetKind.CHAT_GROUP,
            chat_id=message.chat_id,
            message_id=message.id,
            seq=message.seq,
        )


def db_now_offset(entry_id: UUID) -> float:
    """Seconds from the database's now() to the row's next_attempt_at."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT extract(epoch FROM next_attempt_at - now())::float8"
            " FROM messenger.realtime_outbox WHERE id = %s",
            [entry_id],
        )
        return float(cur.fetchone()[0])


def make_due(*entries: RealtimeOutboxEntry) -> None:
    """Bring rows' next attempt to the database's now (skip the backoff wait)."""
    RealtimeOutboxEntry.objects.filter(id__in=[e.id for e in entries]).update(next_attempt_at=Now())


def layer(url: str | list[str], **overrides: Any) -> BatchReceiveRedisChannelLayer:
    """A fresh channel layer configured as the project's (with `overrides`), on the Redis
    at `url` (or sharded over the Redis servers at these URLs, in this ring order)."""
    config = dict(settings.CHANNEL_LAYERS["default"]["CONFIG"], **overrides)
    urls = [url] if isinstance(url, str) else url
    config["hosts"] = [{**config["hosts"][0], "address": address} for address in urls]
    return BatchReceiveRedisChannelLayer(**config)


async def subscribe(channel_layer: RedisChannelLayer, chat_id: UUID) -> str:
    """Join the chat's layer group with a plain channel (any layer instance can read it)."""
    channel = f"test.{uuid4().hex}"
    await channel_layer.group_add(layer_group(HubTarget.chat(chat_id)), channel)
    return channel


def subscribe_sync(url: str, chat_id: UUID) -> str:
    return asyncio.run(subscribe(layer(url), chat_id))


def receive_sync(url: str, channel: str, timeout: float = 10) -> Any:
    return asyncio.run(receive(layer(url), channel, timeout))


async def receive(channel_layer: RedisChannelLayer, channel: str, timeout: float = 10) -> Any:
    return await asyncio.wait_for(channel_layer.receive(channel), timeout)


class RecordingPublisher:
    """A publisher that records what it was asked to push (for call-count assertions)."""

    def __init__(self, fail: bool = False) -> None:
        self.events: list[OutgoingEvent] = []
        self.fail = fail

    async def publish(self, event: OutgoingEvent) -> None:
        self.events.append(event)
        if self.fail:
            raise ConnectionError(111, "refused")


async def end_layers(*layers: Any) -> None:
    """End a test's loop cleanly: close the layers' sockets first (a blocking pop in
    flight fails, and its reader waits to retry: one cancelled in flight did not always
    end, and asyncio.run waited for it forever), cancel every other task, then close what
    a probe opened meanwhile."""
    for used in layers:
        await used.close_pools()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    if others:
        await asyncio.wait(others, timeout=10)
    for used in layers:
        await used.close_pools()
