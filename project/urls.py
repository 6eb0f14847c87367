"""URL configuration of the host project."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("messenger_realtime.hub.routing")),
    path("", include("project.messenger.api.urls")),
]
