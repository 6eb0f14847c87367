"""Driving the dispatcher in-process."""

from typing import Any

from messenger_realtime.conf.settings import RealtimeDispatchOptions
from messenger_realtime.dispatch.dispatcher import Dispatcher, PassResult


async def one_pass(opts: RealtimeDispatchOptions, publisher: Any) -> PassResult:
    dispatcher = Dispatcher(opts, publisher, use_lock=False)
    try:
        return await dispatcher.run_pass()
    finally:
        await dispatcher.close()
