"""A user's typing publishes across every connection and hub process (composing.py,
`claim_in`): one per chat per TYPING_INTERVAL and at most TYPING_CHATS chats, counted
in Redis on its clock; without Redis (no RATE_LIMIT_REDIS_URL, or unreachable) the
connection's own bound is all there is."""

import uuid

from messenger_realtime.hub import ratelimit
from messenger_realtime.hub.connection.composing import TYPING_CHATS, claim_in
from tests.support.runtime import run


def test_a_user_publishes_once_per_chat_and_in_a_few_chats_whatever_the_connection(
    redis_url: str,
) -> None:
    claimed = claim_in(redis_url)
    user, other = uuid.uuid4(), uuid.uuid4()
    chats = [str(uuid.uuid4()) for _ in range(TYPING_CHATS + 1)]

    async def claims() -> list[bool]:
        try:
            return [
                await claimed(user, chats[0]),  # the first in the chat
                await claimed(user, chats[0]),  # again, from any connection: no
                *[await claimed(user, chat) for chat in chats[1:]],  # up to TYPING_CHATS
                await claimed(other, chats[0]),  # another user has their own
            ]
        finally:
            await ratelimit.close_clients()

    assert run(claims()) == [True, False] + [True] * (TYPING_CHATS - 1) + [False, True]


def test_without_redis_every_call_the_connection_would_publish_goes_through() -> None:
    user, chat = uuid.uuid4(), str(uuid.uuid4())
    assert run(claim_in("")(user, chat)) and run(claim_in("")(user, chat))
    unreachable = claim_in("redis://127.0.0.1:1/0")

    async def claims() -> list[bool]:
        try:
            return [await unreachable(user, chat) for _ in range(2)]
        finally:
            await ratelimit.close_clients()

    assert run(claims()) == [True, True]
