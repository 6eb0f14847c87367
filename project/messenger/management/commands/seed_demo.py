"""`python manage.py seed_demo`: demo users (alice, bob, carol) and chats for the demo page;
prints their ids, which a client developer needs to mint a token and open a chat."""

from typing import Any

from django.core.management.base import BaseCommand

from project.messenger import services
from project.messenger.models import Chat, Participant, User

NAMES = ("alice", "bob", "carol")


class Command(BaseCommand):
    help = (
        "Create the demo users demo-alice, demo-bob, demo-carol and their chats (idempotent), "
        "and print their ids."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        users = [
            User.objects.get_or_create(username=f"demo-{n}", defaults={"display_name": n.title()})[
                0
            ]
            for n in NAMES
        ]
        alice, bob, carol = users
        if not Participant.objects.filter(user=alice).exists():
            team = services.create_chat(alice.id, [bob.id, carol.id], title="Demo team")
            direct = services.create_chat(alice.id, [bob.id])
            # They accept the chats alice made: presence is by consent (realtime_port.py).
            for user, chat in ((bob, team), (carol, team), (bob, direct)):
                services.accept_chat(user.id, chat.id)
        self.stdout.write(listing(users))


def listing(users: list[User]) -> str:
    """The demo users and their chats, one per line, ids first, and how to use them."""
    width = max(len(u.username) for u in users)
    lines = ["demo users (id, username, name):"]
    lines += [f"  {u.id}  {u.username:<{width}}  {u.display_name}" for u in users]
    chats = (
        Chat.objects.filter(participants__user__in=users, participants__is_active=True)
        .distinct()
        .order_by("created_at", "id")
        .prefetch_related("participants__user")
    )
    lines.append("demo chats (id, title, members):")
    for chat in chats:
        members = [p.user.username for p in chat.participants.all() if p.is_active]
        title = chat.title or f"{chat.kind} chat"
        lines.append(f"  {chat.id}  {title}  ({', '.join(sorted(members))})")
    lines.append("a token for one of them: python manage.py realtime_token --username demo-alice")
    return "\n".join(lines)
