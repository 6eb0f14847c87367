"""`python manage.py seed_demo`: demo users (alice, bob, carol) and chats for the demo page."""

from typing import Any

from django.core.management.base import BaseCommand

from project.messenger import services
from project.messenger.models import Participant, User

NAMES = ("alice", "bob", "carol")


class Command(BaseCommand):
    help = "Create the demo users demo-alice, demo-bob, demo-carol and their chats (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        users = [
            User.objects.get_or_create(username=f"demo-{n}", defaults={"display_name": n.title()})[
                0
            ]
            for n in NAMES
        ]
        alice, bob, carol = users
        if not Participant.objects.filter(user=alice).exists():
            services.create_chat(alice.id, [bob.id, carol.id], title="Demo team")
            services.create_chat(alice.id, [bob.id])
        self.stdout.write("demo users: " + ", ".join(u.username for u in users))
