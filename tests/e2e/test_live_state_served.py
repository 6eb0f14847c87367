"""Presence and typing for real deployments: `scripts/serve --hubs 2` (two Daphne
processes behind Debian's nginx, the worker), the official @microsoft/signalr client.
A watcher on one process hears a friend on the other come online, type and go offline."""

import pytest

from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.served import Reader, Served, connect_on


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.usefixtures("transactional_db")
def test_across_two_processes_behind_nginx_a_watcher_hears_presence_and_typing(
    served: Served,
) -> None:
    users = [UserFactory(name=f"member{n}") for n in range(8)]
    chat = services.create_chat(users[0].id, [u.id for u in users[1:]])
    for member in users[1:]:  # each accepts it: the others may see their presence
        services.accept_chat(member.id, chat.id)
    readers: list[Reader] = []
    try:
        watcher = connect_on(served, users, readers)
        friend = connect_on(served, users, readers)
        while friend.hub == watcher.hub:  # nginx spreads connections: wait for the other
            friend = connect_on(served, users, readers)
        client = watcher.client
        client.send_line("watch " + f'["{friend.user.id}"]')
        assert client.next("watching")["watching"] == {
            str(friend.user.id): {"online": True, "lastSeen": None}
        }
        friend.client.send_line(f"typing {chat.id}")
        typing = client.next("event", "typing")["payload"]
        assert (typing["chatId"], typing["userId"]) == (str(chat.id), str(friend.user.id))
        friend.client.send_line("stop")
        gone = client.next("event", "presence")["payload"]
        assert (gone["userId"], gone["online"]) == (str(friend.user.id), False)
        assert gone["lastSeen"] is not None
    finally:
        for reader in readers:
            reader.client.kill()
