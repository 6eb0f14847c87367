"""URL configuration of the host project."""

from django.contrib import admin
from django.urls import include, path

from messenger_realtime import webhealth

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("django_prometheus.urls")),  # /metrics (keep it internal)
    path("health/live", webhealth.live),
    path("health/ready", webhealth.ready),
    path("", include("messenger_realtime.hub.routing")),
    path("", include("project.messenger.api.urls")),
]
