from django.urls import path, register_converter

from . import views


class IdConverter:
    """Any one path segment: the endpoint parses it, so a malformed id is a JSON 400
    naming it (base.path_ids), not an HTML 404 from a route that did not match."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: object) -> str:
        return str(value)


register_converter(IdConverter, "id")
CHAT = "api/chats/<id:chat_id>"
CALL = "api/calls/<id:call_id>"
urlpatterns = [
    path("api/chats", views.chats),
    path("api/logout-everywhere", views.logout_everywhere),
    path(CHAT, views.chat),
    path(f"{CHAT}/messages", views.messages),
    path(f"{CHAT}/messages/<id:message_id>", views.message),
    path(f"{CHAT}/read", views.read),
    path(f"{CHAT}/accept", views.accept),
    path(f"{CHAT}/participants", views.participants),
    path(f"{CHAT}/participants/<id:user_id>", views.participant),
    path(f"{CHAT}/calls", views.calls),
    path(f"{CHAT}/conferences", views.conferences),
    path(f"{CALL}/answer", views.call_answer),
    path(f"{CALL}/decline", views.call_decline),
    path(f"{CALL}/cancel", views.call_cancel),
    path(f"{CALL}/end", views.call_end),
    path(f"{CALL}/invite", views.call_invite),
    path(f"{CALL}/join", views.call_join),
    path(f"{CALL}/leave", views.call_leave),
    path(f"{CALL}/screen-share", views.call_screen_share),
    path(f"{CALL}/recordings", views.call_recordings),
    # Any other action: the JSON 400 it got before each action had a route (not HTML 404).
    path(f"{CALL}/<slug:action>", views.call_unknown),
    path("api/recordings/<id:recording_id>/stop", views.recording_stop),
    path("api/contacts", views.contacts),
    path("api/contacts/<id:contact_id>", views.contact),
    path("api/contacts/<id:contact_id>/accept", views.contact_accept),
    path("api/blacklist", views.blacklist),
    path("api/blacklist/<id:user_id>", views.blacklist_entry),
]
