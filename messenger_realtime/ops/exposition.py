"""Which process exports which metric families: each serves only its own.

Every family is defined once in ops/metrics.py on prometheus_client's default registry,
which django-prometheus also uses. The worker's /metrics (ops/health.py) exports the
dispatch families plus the process collectors; Daphne's /metrics (web_metrics below)
exports everything else: the hub's families and django-prometheus' request metrics. So a
scrape of Daphne never shows the worker's gauges at zero (which would page
RealtimeDispatchNoPasses for the web job and hide RealtimeDispatchWorkerDown), and the
worker never shows web families. In single-process mode the dispatcher runs inside
Daphne, and Daphne exports its families too (project/asgi.py turns that on).
"""

from collections.abc import Callable, Iterable

from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric

from messenger_realtime.ops import metrics

# prometheus_client's default process collectors: every process exports its own.
PROCESS_PREFIXES = ("process_", "python_")
_web_exports_worker_families = False


def worker_family_names() -> frozenset[str]:
    """Names of the worker's families: every family of ops/metrics.py not WEB_FAMILIES
    (SHARED_FAMILIES are both processes' and counted apart: neither filters them out)."""
    web = {id(family) for family in (*metrics.WEB_FAMILIES, *metrics.SHARED_FAMILIES)}
    return frozenset(
        described.name
        for value in vars(metrics).values()
        if isinstance(value, MetricWrapperBase) and id(value) not in web
        for described in value.describe()
    )


class FilteredRegistry:
    """The default registry's families whose name `keep` accepts (a Collector)."""

    def __init__(self, keep: Callable[[str], bool]) -> None:
        self.keep = keep

    def collect(self) -> Iterable[Metric]:
        return [family for family in REGISTRY.collect() if self.keep(family.name)]


def worker_registry() -> FilteredRegistry:
    """What the dispatch worker exports: its families and the process collectors."""
    names = worker_family_names() | shared_family_names()
    return FilteredRegistry(lambda name: name in names or name.startswith(PROCESS_PREFIXES))


def shared_family_names() -> frozenset[str]:
    """Families both processes count (each its own share), so both export them."""
    return frozenset(d.name for family in metrics.SHARED_FAMILIES for d in family.describe())


def web_registry() -> FilteredRegistry:
    """What Daphne exports: all but the worker's families (unless it runs the dispatcher)."""
    if _web_exports_worker_families:
        return FilteredRegistry(lambda name: True)
    names = worker_family_names()
    return FilteredRegistry(lambda name: name not in names)


def export_worker_families_from_web() -> None:
    """Single-process mode: the dispatcher runs inside Daphne, so Daphne exports it."""
    global _web_exports_worker_families
    _web_exports_worker_families = True


def web_metrics(request: HttpRequest) -> HttpResponse:
    """Daphne's /metrics (keep it internal: the reverse proxy does not route it)."""
    return HttpResponse(generate_latest(web_registry()), content_type=CONTENT_TYPE_LATEST)
