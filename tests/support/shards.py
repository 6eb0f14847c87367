"""Names chosen for the Redis host channels-redis hashes them to (sharded-layer tests)."""

import uuid
from typing import Any

from messenger_realtime.backplane import shards
from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.contracts.events import HubTarget


def chat_on(layer: Any, host: int) -> uuid.UUID:
    """A chat id whose layer group lives on `host`."""
    while True:  # half of all ids on two hosts: a few draws
        chat = uuid.uuid4()
        if shards.group_host(layer, layer_group(HubTarget.chat(chat))) == host:
            return chat


def user_on(layer: Any, host: int) -> uuid.UUID:
    """A user id whose layer group lives on `host`."""
    while True:
        user = uuid.uuid4()
        if shards.group_host(layer, layer_group(HubTarget.user(user))) == host:
            return user


def process_on(layer: Any, host: int) -> Any:
    """`layer` as a Daphne process whose queue ("specific.<prefix>!") lives on `host`."""
    while shards.channel_key_host(layer, process_key(layer)) != host:
        layer.client_prefix = uuid.uuid4().hex
    return layer


def process_key(layer: Any) -> str:
    """The Redis key of the process's queue (every connection of it shares it)."""
    return f"{layer.prefix}specific.{layer.client_prefix}!"


def group_key(layer: Any, group: str) -> str:
    return f"{layer.prefix}:group:{group}"
