"""Content a user wrote fails only its own row: one poison row among 99 innocent rows of
other chats, each way content can break the push (an integer past 64 bits, nesting past
the encoders' limits or Python's), through a real pass, real PostgreSQL and real Redis.
The 99 are delivered in the first pass and none is retried; the poison row is
quarantined at once, saying which field."""

import uuid
from typing import Any

import pytest
from django.db import connection

from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.backplane.publisher import ChannelLayerPublisher
from messenger_realtime.contracts import build
from messenger_realtime.contracts.events import HubTarget, OutgoingEvent
from messenger_realtime.exceptions import UnencodablePayload
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from project.messenger.models import Message
from tests.support.dispatch import one_pass
from tests.support.factories import MessageFactory, OutboxEntryFactory
from tests.support.helpers import RecordingPublisher, layer, options, receive
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")
INNOCENT = 99


def nested(levels: int) -> str:
    """A JSON object `levels` deep, as text (json.dumps itself recurses past ~1,000)."""
    return '{"a":' * levels + "1" + "}" * levels


def poison_row(file_meta_json: str) -> RealtimeOutboxEntry:
    """A File message whose stored metadata was written around the API (legacy data)."""
    message = MessageFactory(kind="File", body="", file_meta={"name": "a"})
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Message._meta.db_table} SET file_meta = %s::jsonb WHERE id = %s",
            [file_meta_json, message.id],
        )
    return OutboxEntryFactory(message=message)


def deliver_with_poison(redis_url: str, poison: RealtimeOutboxEntry) -> list[Any]:
    """One pass over the poison row and INNOCENT rows of other chats, all in one claim and
    one push chunk; the messages that reached the one channel listening to every chat."""
    innocent = [OutboxEntryFactory() for _ in range(INNOCENT)]

    async def scenario() -> list[Any]:
        channel_layer = layer(redis_url)
        channel = f"test.{uuid.uuid4().hex}"
        for row in [poison, *innocent]:
            await channel_layer.group_add(layer_group(HubTarget.chat(row.chat_id)), channel)
        result = await one_pass(options(batch_size=200), ChannelLayerPublisher(channel_layer))
        assert result.batches == 1  # one claim, one build, one push chunk of 100
        return [await receive(channel_layer, channel) for _ in range(result.dispatched)]

    received = run(scenario())
    assert sorted(m["payload"]["messageId"] for m in received) == sorted(
        str(row.message_id) for row in innocent
    )
    rows = RealtimeOutboxEntry.objects.filter(id__in=[r.id for r in innocent])
    # Done in the first pass, at the first attempt, never marked for a retry.
    assert {(r.status, r.attempts, r.last_error) for r in rows} == {(Status.DONE, 1, None)}
    return received


def quarantined_error(row: RealtimeOutboxEntry) -> str:
    row.refresh_from_db()
    assert (row.status, row.attempts) == (Status.QUARANTINED, 1)
    return str(row.last_error)


def test_an_integer_past_64_bits_quarantines_its_row_alone(redis_url: str) -> None:
    poison = poison_row('{"name": "a", "size": 79228162514264337593543950336}')  # 2^96
    deliver_with_poison(redis_url, poison)
    assert quarantined_error(poison) == (
        "UnencodablePayload: fileMeta.size is out of range (integers within ±9007199254740991)"
    )


def test_an_integer_javascript_would_round_quarantines_its_row_alone(redis_url: str) -> None:
    poison = poison_row('{"name": "a", "size": 9007199254740993}')  # 2^53 + 1: fits msgpack
    deliver_with_poison(redis_url, poison)
    assert quarantined_error(poison).startswith("UnencodablePayload: fileMeta.size is out of")


def test_nesting_past_msgpacks_limit_quarantines_its_row_alone(redis_url: str) -> None:
    poison = poison_row(nested(600))  # msgpack refuses to pack past 511 levels
    deliver_with_poison(redis_url, poison)
    assert quarantined_error(poison) == (
        "UnencodablePayload: fileMeta is nested deeper than 31 levels"
    )


def test_nesting_past_pythons_recursion_limit_quarantines_its_row_alone(redis_url: str) -> None:
    # json.loads raises RecursionError reading it: the port returns it as Unreadable
    # instead of failing the read of the whole batch.
    poison = poison_row(nested(5000))
    deliver_with_poison(redis_url, poison)
    assert quarantined_error(poison) == (
        "UnencodablePayload: fileMeta could not be read (nested too deeply)"
    )


def test_what_the_build_check_missed_the_layer_refuses_for_that_row_alone(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Defence in depth: with the build's check gone, channels-redis' serializer meets the
    # 2^96 itself (OverflowError), for that message alone.
    monkeypatch.setattr(build.content, "check", lambda *args: None)
    poison = poison_row('{"name": "a", "size": 79228162514264337593543950336}')
    deliver_with_poison(redis_url, poison)
    assert quarantined_error(poison) == (
        "UnencodablePayload: the channel layer could not serialize it (OverflowError)"
    )


def test_the_pipelined_publisher_fails_an_unserializable_event_alone(redis_url: str) -> None:
    chats = [uuid.uuid4() for _ in range(5)]

    async def scenario() -> tuple[list[Any], list[Any]]:
        channel_layer = layer(redis_url)
        channel = f"test.{uuid.uuid4().hex}"
        for chat in chats:
            await channel_layer.group_add(layer_group(HubTarget.chat(chat)), channel)
        events = [
            OutgoingEvent(HubTarget.chat(chat), "message_received", {"n": n})
            for n, chat in enumerate(chats)
        ]
        events[2] = OutgoingEvent(HubTarget.chat(chats[2]), "message_received", {"n": 2**96})
        results = await ChannelLayerPublisher(channel_layer).publish_many(events)
        return results, [(await receive(channel_layer, channel))["payload"] for _ in range(4)]

    results, received = run(scenario())
    assert [type(r) for r in results] == [type(None)] * 2 + [UnencodablePayload] + [type(None)] * 2
    assert received == [{"n": 0}, {"n": 1}, {"n": 3}, {"n": 4}]  # in order, without it


class RefusesOne(RecordingPublisher):
    """A batch publisher that raises (not a Redis error) for any chunk holding one chat's
    event: as an encoder bug that only that row's content sets off would."""

    def __init__(self, chat_id: uuid.UUID) -> None:
        super().__init__()
        self.bad = str(chat_id)

    async def publish_many(self, events: list[OutgoingEvent]) -> list[BaseException | None]:
        if any(e.payload["chatId"] == self.bad for e in events):
            raise ValueError("an encoder bug")
        self.events.extend(events)
        return [None] * len(events)


def test_a_push_that_raises_for_no_known_reason_isolates_rows_instead_of_retrying_all() -> None:
    poison = OutboxEntryFactory()
    innocent = [OutboxEntryFactory() for _ in range(9)]
    publisher = RefusesOne(poison.chat_id)
    run(one_pass(options(batch_size=200), publisher))
    # The chunk failed: each row was retried alone, at once, with its attempt given back;
    # alone, the nine went out and only the poison row keeps failing (a suspect).
    delivered = sorted(e.payload["messageId"] for e in publisher.events)
    assert delivered == sorted(str(r.message_id) for r in innocent)
    rows = RealtimeOutboxEntry.objects.filter(id__in=[r.id for r in innocent])
    assert {(r.status, r.attempts) for r in rows} == {(Status.DONE, 1)}
    poison.refresh_from_db()
    assert poison.status == Status.PENDING and poison.claimed_at is not None  # a suspect
    assert poison.last_error == "builtins.ValueError"


def test_a_redis_failure_still_retries_the_whole_chunk(dead_redis_url: str) -> None:
    rows = [OutboxEntryFactory() for _ in range(3)]
    run(one_pass(options(batch_size=200), ChannelLayerPublisher(layer(dead_redis_url))))
    found = RealtimeOutboxEntry.objects.filter(id__in=[r.id for r in rows])
    assert {(r.status, r.attempts, r.claimed_at) for r in found} == {(Status.PENDING, 1, None)}
    assert all(str(r.last_error).startswith("redis.exceptions.ConnectionError") for r in found)
