from django.urls import path

from . import views as v

C = "api/chats/<uuid:chat_id>"
urlpatterns = [
    path("api/chats", v.chats),
    path(C, v.chat),
    path(f"{C}/messages", v.messages),
    path(f"{C}/messages/<uuid:message_id>", v.message),
    path(f"{C}/read", v.read),
    path(f"{C}/participants", v.participants),
    path(f"{C}/participants/<uuid:user_id>", v.participant),
    path(f"{C}/calls", v.calls),
    path(f"{C}/conferences", v.conferences),
    path("api/calls/<uuid:call_id>/<slug:action>", v.call),
    path("api/recordings/<uuid:recording_id>/stop", v.recording_stop),
    path("api/contacts", v.contacts),
    path("api/contacts/<uuid:contact_id>", v.contact),
    path("api/contacts/<uuid:contact_id>/accept", v.contact_accept),
    path("api/blacklist", v.blacklist),
    path("api/blacklist/<uuid:user_id>", v.blacklist_entry),
]
