"""`manage.py chat users NAME...` | `chat create TITLE USER_ID...` | `chat say CHAT_ID
USER_ID BODY`: the host's use cases from a shell; each prints JSON."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chat import services
from chat.models import User


class Command(BaseCommand):
    help = "Create users, create a chat, post a message (each prints JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["users", "create", "say"])
        parser.add_argument("values", nargs="+")

    def handle(self, *args: Any, action: str, values: list[str], **options: Any) -> None:
        if action == "users":
            users = {name: str(User.objects.create_user(name).id) for name in values}
            self.stdout.write(json.dumps(users))
        elif action == "create":
            chat = services.create_chat(values[1], values[0], values[2:])
            self.stdout.write(json.dumps({"chat": str(chat.id)}))
        else:
            message, entry = services.post_message(values[0], values[1], " ".join(values[2:]))
            self.stdout.write(json.dumps({"message": str(message.id), "entry": str(entry.id)}))
