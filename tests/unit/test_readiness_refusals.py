"""A process's own reason not to be ready (ops/webhealth.refuse) holds until its cause
has passed: a single-process hub that found the dispatch lock held (a second process,
or its own previous run's session after a restart) is ready again once it leads."""

from messenger_realtime.ops import webhealth


def test_a_refusal_holds_until_it_is_lifted_then_is_gone() -> None:
    leading = False
    webhealth.refuse("dispatch-test", "another process dispatches", lambda: leading)
    try:
        assert webhealth.refused("dispatch-test")
        assert webhealth.refused("dispatch-test")  # it holds, probe after probe
        leading = True
        assert not webhealth.refused("dispatch-test")
        leading = False  # lifted once: gone, until refused again
        assert not webhealth.refused("dispatch-test")
    finally:
        webhealth._refusals.pop("dispatch-test", None)
