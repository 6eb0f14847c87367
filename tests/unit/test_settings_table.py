"""Settings are declared once (conf/declared.py): the docs' table, the options the roles
build and the rules all come from that declaration, and disagree with it nowhere."""

import dataclasses

from messenger_realtime.conf import declared
from messenger_realtime.conf.declared import HUB, SETTINGS, WORKER, role_keys, validate
from messenger_realtime.conf.settings import DEFAULTS, HubOptions, RealtimeDispatchOptions
from tests.support.runtime import ROOT


def test_the_docs_table_is_the_declarations() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    begin, end = text.index(declared.TABLE_BEGIN), text.index(declared.TABLE_END)
    in_docs = text[begin + len(declared.TABLE_BEGIN) : end].strip()
    assert in_docs == declared.markdown_table(), (
        "docs/operations.md's settings table differs from conf/declared.py: paste the "
        "output of `python -m messenger_realtime.conf.declared` between its markers"
    )


def test_each_roles_options_are_exactly_its_declared_keys() -> None:
    for role, options in ((WORKER, RealtimeDispatchOptions), (HUB, HubOptions)):
        fields = {f.name.upper() for f in dataclasses.fields(options)}
        assert fields | {"DOMAIN_PORT"} == role_keys(role) | {"DOMAIN_PORT"}, role
    assert {s.name for s in SETTINGS} == role_keys(WORKER) | role_keys(HUB)
    assert len({s.name for s in SETTINGS}) == len(SETTINGS)  # each key once


def test_every_default_meets_its_own_rules_but_the_secrets_it_leaves_empty() -> None:
    # The media secrets may stay empty: only a port that reads calls needs them
    # (contracts/checks.py requires them there).
    problems = validate(DEFAULTS)
    media = {"MEDIA_JWT_SIGNING_KEY", "TURN_SHARED_SECRET"}
    assert {(check_id, key) for check_id, key, _ in problems} == {
        ("E012", s.name) for s in SETTINGS if s.secret and s.name not in media
    }


def test_every_number_has_an_upper_bound_or_a_range() -> None:
    # A value past a sane bound is a typo (issue 29): 10^12 for a TTL or a batch size.
    for s in SETTINGS:
        if s.kind in (int, float):
            ranged = any(r.check_id == "E027" or "in [" in r.problem for r in s.rules)
            bounded = ranged or any("at most" in r.problem or "below" in r.problem for r in s.rules)
            assert bounded, f"{s.name} has no upper bound"
