"""Each process exports only its own metric families (ops/exposition.py)."""

import pytest
from prometheus_client import REGISTRY, Counter

from messenger_realtime.ops import exposition, metrics
from messenger_realtime.ops.exposition import FilteredRegistry, web_registry, worker_registry

WORKER_FAMILIES = {
    "messenger_realtime_pending",
    "messenger_realtime_oldest_pending_age_seconds",
    "messenger_realtime_lag_seconds",
    "messenger_realtime_dispatched",
    "messenger_realtime_retried",
    "messenger_realtime_quarantined",
    "messenger_realtime_last_pass_timestamp_seconds",
    "messenger_realtime_claim_duration_seconds",
    "messenger_realtime_build_duration_seconds",
}
HUB_FAMILIES = {
    "messenger_realtime_hub_connections",
    "messenger_realtime_hub_disconnects",
    "messenger_realtime_hub_forced_closes",
    "messenger_realtime_hub_resumes",
}
SHARED = {"messenger_realtime_channel_overruns"}  # both count their own lost deliveries


def names(registry: FilteredRegistry) -> set[str]:
    return {family.name for family in registry.collect()}


def test_the_worker_exports_the_dispatch_families_and_no_web_family() -> None:
    exported = names(worker_registry())
    assert exported >= WORKER_FAMILIES | SHARED
    assert "process_cpu_seconds" in exported  # its own process collector
    web = {n for n in exported if n.startswith(("django_", "messenger_realtime_hub_"))}
    assert web == set()


def test_the_web_process_exports_the_hub_and_request_families_and_no_worker_family() -> None:
    exported = names(web_registry())
    assert exported >= HUB_FAMILIES | SHARED
    assert "django_model_inserts" in exported  # django-prometheus' families
    assert exported & WORKER_FAMILIES == set()


def test_a_family_added_to_the_metrics_module_is_the_workers_unless_listed_as_web(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    added = Counter("messenger_realtime_added_for_test", "A family another change adds.")
    monkeypatch.setattr(metrics, "added_for_test", added, raising=False)
    try:
        assert "messenger_realtime_added_for_test" in names(worker_registry())
        assert "messenger_realtime_added_for_test" not in names(web_registry())
        monkeypatch.setattr(metrics, "WEB_FAMILIES", (*metrics.WEB_FAMILIES, added))
        assert "messenger_realtime_added_for_test" not in names(worker_registry())
        assert "messenger_realtime_added_for_test" in names(web_registry())
    finally:
        REGISTRY.unregister(added)


def test_in_single_process_mode_daphne_also_exports_the_dispatch_families(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(exposition, "_web_exports_worker_families", True)
    assert names(web_registry()) >= WORKER_FAMILIES | HUB_FAMILIES
