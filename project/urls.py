"""URL configuration of the host project."""

from django.contrib import admin
from django.urls import include, path

from project import site
from project.messenger import demo

urlpatterns = [
    path("", site.home, name="home"),  # where things are: hub, API, admin, health
    path("admin/", admin.site.urls),
    # /metrics (this process' own families; the proxy does not route it), /health/*.
    path("", include("messenger_realtime.urls")),
    path("favicon.ico", site.favicon, name="favicon"),
    path("demo/", demo.page, name="demo"),
    path("demo/sign-in", demo.sign_in, name="demo-sign-in"),
    path("demo/sign-out", demo.sign_out, name="demo-sign-out"),
    path("demo/token", demo.token, name="demo-token"),
    path("", include("project.messenger.api.urls")),
]

# Error pages: JSON under /api/, Django's own elsewhere.
handler400 = "project.messenger.api.errors.bad_request"
handler403 = "project.messenger.api.errors.permission_denied"
handler404 = "project.messenger.api.errors.page_not_found"
handler500 = "project.messenger.api.errors.server_error"
