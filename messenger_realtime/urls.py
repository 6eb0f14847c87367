"""The routes a host includes once, at its root or under a prefix of its choosing:

    path("", include("messenger_realtime.urls")),

/health/live and /health/ready (a supervisor's and a load balancer's probes) and
/metrics (this process's own metric families; keep it internal: the reverse proxy does
not route it). The hub's own paths are ASGI routes, not URLs (messenger_realtime/asgi.py).
"""

from django.urls import path

from messenger_realtime.ops import exposition, webhealth

app_name = "messenger_realtime"

urlpatterns = [
    path("metrics", exposition.web_metrics, name="metrics"),
    path("health/live", webhealth.live, name="health-live"),
    path("health/ready", webhealth.ready, name="health-ready"),
]
