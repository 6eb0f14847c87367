"""The chaos self-test's broken worker (bench/chaos.py --self-test): `manage.py
dispatch_realtime` whose push silently drops one message_received in a hundred after
building it, and reports it pushed (its row ends Done). The injection lives here, in the
script, not behind a flag in the product: the soak's checker must find these events."""

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

from messenger_realtime.backplane.publisher import ChannelLayerPublisher  # noqa: E402

EVERY = 100
_original = ChannelLayerPublisher.publish_many
_seen = 0


async def publish_dropping(self: Any, events: list[Any]) -> list[BaseException | None]:
    global _seen
    kept, dropped = [], set()
    for index, event in enumerate(events):
        if event.name == "message_received":
            _seen += 1
            if _seen % EVERY == 0:
                dropped.add(index)
                continue
        kept.append(event)
    results = iter(await _original(self, kept))
    return [None if index in dropped else next(results) for index in range(len(events))]


ChannelLayerPublisher.publish_many = publish_dropping  # type: ignore[method-assign]
call_command("dispatch_realtime")
