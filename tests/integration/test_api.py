"""The REST API: source-of-truth reads, bad input as 4xx with a reason, nothing written on
refusal, and the owner transaction rule."""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now
from django.test import Client

from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.streams import current_offsets
from project.messenger import services
from project.messenger.api.base import STATUS_OF_ERROR, BadRequest, CsrfRefused, status_of
from project.messenger.models import Chat, Message, Participant
from project.messenger.realtime_port import HostDomainPort
from project.messenger.services import errors
from tests.support.factories import MessageFactory, UserFactory
from tests.support.hub_helpers import token_for

pytestmark = pytest.mark.django_db


class As:
    """Requests as one user, with the hub's JWT."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self.client = Client(headers={"Authorization": f"Bearer {token_for(user.id)}"})

    def __call__(self, method: str, path: str, data: Any = None, raw: str | None = None) -> Any:
        content = raw if raw is not None else json.dumps(data) if data is not None else ""
        response = getattr(self.client, method.lower())(
            path, content, content_type="application/json"
        )
        body = response.json() if response.content else None
        return response.status_code, body


@pytest.fixture
def people() -> tuple[As, As, As, Any]:
    alice, bob, eve = (UserFactory(name=n) for n in ("alice", "bob", "eve"))
    chat = services.create_chat(alice.id, [bob.id])
    return As(alice), As(bob), As(eve), chat


def test_list_messages_is_ordered_by_seq_and_pages_after_a_seq(people: Any) -> None:
    alice, bob, _eve, chat = people
    for n in range(5):
        assert alice("POST", f"/api/chats/{chat.id}/messages", {"body": f"m{n}"})[0] == 201
    status, page = bob("GET", f"/api/chats/{chat.id}/messages?afterSeq=2&limit=2")
    assert status == 200
    assert [(m["seq"], m["body"]) for m in page["messages"]] == [(3, "m2"), (4, "m3")]
    status, got = bob("GET", f"/api/chats/{chat.id}")
    assert (got["lastSeq"], {p["userId"] for p in got["participants"]}) == (
        5,
        {str(alice.user.id), str(bob.user.id)},
    )


def test_accepting_a_chat_lets_its_members_see_ones_presence(people: Any) -> None:
    """POST /api/chats/{id}/accept: a member put in a chat by someone else consents to
    being seen there (presence by consent, the project's port); a non-member gets 404."""
    alice, bob, eve, chat = people
    port = HostDomainPort()
    assert set(port.visible_users(alice.user.id, [bob.user.id])) == set()
    status, body = bob("POST", f"/api/chats/{chat.id}/accept")
    assert status == 200 and body["userId"] == str(bob.user.id)
    assert set(port.visible_users(alice.user.id, [bob.user.id])) == {bob.user.id}
    assert eve("POST", f"/api/chats/{chat.id}/accept") == (404, {"error": "chat not found"})


def test_a_non_participant_gets_404_and_learns_nothing(people: Any) -> None:
    alice, _bob, eve, chat = people
    alice("POST", f"/api/chats/{chat.id}/messages", {"body": "private"})
    for method, path, data in [
        ("GET", f"/api/chats/{chat.id}", None),
        ("GET", f"/api/chats/{chat.id}/messages", None),
        ("POST", f"/api/chats/{chat.id}/messages", {"body": "let me in"}),
        ("POST", f"/api/chats/{chat.id}/read", {"seq": 1}),
        ("POST", f"/api/chats/{chat.id}/participants", {"userId": str(eve.user.id)}),
    ]:
        status, body = eve(method, path, data)
        assert (status, body) == (404, {"error": "chat not found"}), (method, path)
    assert Message.objects.filter(body="let me in").count() == 0


@pytest.mark.parametrize(
    ("method", "path", "data", "raw", "status", "reason"),
    [
        ("POST", "/api/chats", None, "{nope", 400, "not valid JSON"),
        ("POST", "/api/chats", None, "[1]", 400, "JSON object"),
        ("POST", "/api/chats", {"memberIds": []}, None, 400, "memberIds"),
        ("POST", "/api/chats", {"memberIds": ["x"]}, None, 400, "memberIds must be a UUID"),
        (
            "POST",
            "/api/chats",
            {"memberIds": ["00000000-0000-7000-8000-000000000000"]},
            None,
            400,
            "unknown users",
        ),
        ("POST", "/api/chats/{chat}/messages", {"body": "  "}, None, 400, "body must be"),
        ("POST", "/api/chats/{chat}/messages", {"body": 5}, None, 400, "body must be a string"),
        ("POST", "/api/chats/{chat}/messages", {"kind": "Video"}, None, 400, "kind must be"),
        (
            "POST",
            "/api/chats/{chat}/messages",
            {"kind": "File", "fileMeta": 1},
            None,
            400,
            "fileMeta",
        ),
        ("POST", "/api/chats/{chat}/messages", {"body": "x" * 10_001}, None, 400, "1-10000"),
        ("GET", "/api/chats/{chat}/messages?limit=0", None, None, 400, "limit"),
        ("GET", "/api/chats/{chat}/messages?afterSeq=x", None, None, 400, "afterSeq"),
        ("POST", "/api/chats/{chat}/read", {"seq": 99}, None, 400, "between 0 and"),
        ("POST", "/api/chats/{chat}/read", {"seq": True}, None, 400, "integer"),
        ("PUT", "/api/chats/{chat}", {}, None, 405, "method not allowed"),
        ("POST", "/api/contacts", {"userId": "{alice}"}, None, 400, "yourself"),
        ("POST", "/api/calls/{chat}/fly", {}, None, 400, "unknown call action 'fly'"),
        ("POST", "/api/calls/{chat}/fly", None, "{nope", 400, "not valid JSON"),
        ("POST", "/api/calls/{chat}/answer", None, "{nope", 400, "not valid JSON"),
        ("GET", "/api/calls/{chat}/answer", None, None, 405, "use POST"),
        ("POST", "/api/chats/{chat}/conferences", None, "x" * 70_000, 400, "over 65536"),
    ],
)
def test_bad_input_is_a_4xx_with_a_reason_and_writes_nothing(
    people: Any, method: str, path: str, data: Any, raw: str | None, status: int, reason: str
) -> None:
    alice, _bob, _eve, chat = people
    fill = {"chat": str(chat.id), "alice": str(alice.user.id)}
    path = path.format(**fill)
    data = json.loads(json.dumps(data).replace("{alice}", fill["alice"])) if data else data
    before = (RealtimeOutboxEntry.objects.count(), Message.objects.count(), Chat.objects.count())
    got_status, body = alice(method, path, data, raw)
    assert got_status == status and reason in body["error"]
    after = (RealtimeOutboxEntry.objects.count(), Message.objects.count(), Chat.objects.count())
    assert after == before


@pytest.mark.parametrize(
    ("authorization", "reason"),
    [
        (None, "no credentials"),
        ("Bearer garbage", "invalid token"),
        ("Basic abc", "no credentials"),
    ],
)
def test_requests_without_a_valid_token_get_401(authorization: str | None, reason: str) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    response = Client(headers=headers).get("/api/chats")
    assert response.status_code == 401
    assert reason in response.json()["error"]


def test_edit_window_is_60_seconds_on_the_database_clock(people: Any) -> None:
    alice, bob, _eve, chat = people
    _, sent = alice("POST", f"/api/chats/{chat.id}/messages", {"body": "typo"})
    path = f"/api/chats/{chat.id}/messages/{sent['messageId']}"
    assert bob("PATCH", path, {"body": "not mine"})[0] == 403
    assert alice("PATCH", path, {"body": "fixed"})[1]["body"] == "fixed"
    old = MessageFactory(
        chat=chat, sender=alice.user, body="old", sent_at=Now() - timedelta(seconds=61)
    )
    status, body = alice("PATCH", f"/api/chats/{chat.id}/messages/{old.id}", {"body": "late"})
    assert (status, body["error"]) == (403, "messages can be edited within 60 seconds of sending")
    assert Message.objects.get(id=old.id).body == "old"


def test_an_owner_use_case_failing_after_its_writes_leaves_nothing(
    people: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, bob, _eve, _chat = people
    counts = (
        Chat.objects.count(),
        Participant.objects.count(),
        RealtimeOutboxEntry.objects.count(),
    )

    class Boom(Exception):
        pass

    def fail_after_writes(*user_ids: Any) -> None:
        raise Boom  # runs after the chat, participants, feed and outbox rows were written

    monkeypatch.setattr("project.messenger.services.chats.membership_changed", fail_after_writes)
    with pytest.raises(Boom):
        services.create_chat(alice.user.id, [bob.user.id], title="doomed")
    assert (
        Chat.objects.count(),
        Participant.objects.count(),
        RealtimeOutboxEntry.objects.count(),
    ) == counts


def test_session_callers_need_the_csrf_token_bearer_callers_do_not(people: Any) -> None:
    alice, _bob, _eve, chat = people
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice.user)
    path = f"/api/chats/{chat.id}/messages"
    forged = browser.post(path, json.dumps({"body": "from evil.example"}), "application/json")
    assert forged.status_code == 403 and "CSRF" in forged.json()["error"]
    assert browser.get(path).status_code == 200  # safe methods need no token
    browser.get("/admin/login/")  # any page that sets the CSRF cookie
    token = browser.cookies["csrftoken"].value
    ok = browser.post(
        path, json.dumps({"body": "mine"}), "application/json", headers={"X-CSRFToken": token}
    )
    assert ok.status_code == 201
    assert Message.objects.filter(body="from evil.example").count() == 0


def test_blocking_is_idempotent_and_an_empty_unblock_writes_nothing(people: Any) -> None:
    alice, bob, _eve, _chat = people
    RealtimeOutboxEntry.objects.all().delete()
    path = f"/api/blacklist/{bob.user.id}"
    assert alice("DELETE", path)[0] == 204  # never blocked: nothing to say
    assert RealtimeOutboxEntry.objects.count() == 0
    for _ in range(2):
        assert alice("POST", "/api/blacklist", {"userId": str(bob.user.id)})[0] == 201
    assert list(RealtimeOutboxEntry.objects.values_list("kind", "target_user_id")) == [
        ("BlacklistChanged", alice.user.id)
    ]
    alice("DELETE", path)
    assert RealtimeOutboxEntry.objects.count() == 2


def test_list_chats_takes_the_same_five_queries_for_one_chat_and_for_five(
    django_assert_num_queries: Any,
) -> None:
    alice, bob, carol, dave = (UserFactory(name=n) for n in ("alice", "bob", "carol", "dave"))
    services.create_chat(alice.id, [bob.id])
    as_alice = As(alice)
    # The caller, the chat ids, their streams' offsets, the chats, all their participants.
    with django_assert_num_queries(5):
        assert len(as_alice("GET", "/api/chats")[1]["chats"]) == 1
    for n in range(4):
        services.create_chat(alice.id, [bob.id, carol.id, dave.id], title=f"team {n}")
    with django_assert_num_queries(5):
        status, got = as_alice("GET", "/api/chats")
    assert status == 200
    assert sorted(
        (c["title"], sorted(p["displayName"] for p in c["participants"])) for c in got["chats"]
    ) == [("", ["alice", "bob"])] + [
        (f"team {n}", ["alice", "bob", "carol", "dave"]) for n in range(4)
    ]


def test_each_call_action_path_runs_its_own_use_case(people: Any) -> None:
    alice, bob, _eve, chat = people

    def act(who: As, call: dict[str, Any], action: str, data: Any = None) -> Any:
        return who("POST", f"/api/calls/{call['callId']}/{action}", data)

    ring = f"/api/chats/{chat.id}/calls"
    declined = act(bob, alice("POST", ring)[1], "decline")
    cancelled = act(alice, alice("POST", ring)[1], "cancel")
    call = alice("POST", ring)[1]
    answered, ended = act(bob, call, "answer"), act(alice, call, "end")
    conference = alice("POST", f"/api/chats/{chat.id}/conferences")[1]
    invited = act(alice, conference, "invite", {"userId": str(bob.user.id)})
    joined = act(bob, conference, "join")
    shared = act(bob, conference, "screen-share", {"active": True})
    recording = act(alice, conference, "recordings")
    left = act(bob, conference, "leave")
    assert [
        (declined[0], declined[1]["status"]),
        (cancelled[0], cancelled[1]["status"]),
        (answered[0], answered[1]["status"], "media" in answered[1]),
        (ended[0], ended[1]["status"], "media" in ended[1]),
        (invited[0], invited[1]["callId"]),
        (joined[0], joined[1]["callId"], "media" in joined[1]),
        (shared[0], shared[1]["userId"], shared[1]["screenSharing"]),
        (recording[0], recording[1]["status"]),
        (left[0], left[1]["userId"]),
    ] == [
        (200, "Declined"),
        (200, "Cancelled"),
        (200, "Active", True),
        (200, "Ended", False),
        (200, conference["callId"]),
        (200, conference["callId"], True),
        (200, str(bob.user.id), True),
        (201, "Recording"),
        (200, str(bob.user.id)),
    ]


def _subclasses(cls: type[errors.DomainError]) -> set[type[errors.DomainError]]:
    direct = set(cls.__subclasses__())
    return direct.union(*(_subclasses(sub) for sub in direct))


def test_the_status_table_maps_every_domain_error_class_and_nothing_else() -> None:
    domain = {
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.DomainError)
    }
    assert set(STATUS_OF_ERROR) == domain - {errors.DomainError}
    assert {cls: status_of(cls("x")) for cls in _subclasses(errors.DomainError)} == {
        errors.InvalidInput: 400,
        errors.Forbidden: 403,
        errors.NotFound: 404,
        errors.Conflict: 409,
        BadRequest: 400,
        CsrfRefused: 403,
    }
    with pytest.raises(TypeError, match="no HTTP status for DomainError"):
        status_of(errors.DomainError("unclassified"))


def test_chat_payloads_carry_their_streams_offset_and_the_list_the_users(people: Any) -> None:
    alice, _bob, _eve, chat = people
    stream = f"chat:{chat.id}"
    before = current_offsets([stream])[stream]
    services.post_message(alice.user.id, chat.id, "one")
    services.post_message(alice.user.id, chat.id, "two")
    status, got = alice("GET", f"/api/chats/{chat.id}")
    assert status == 200
    assert (got["stream"], got["offset"]) == (stream, before + 2)
    status, listed = alice("GET", "/api/chats")
    assert [(c["stream"], c["offset"]) for c in listed["chats"]] == [(stream, before + 2)]
    own = f"user:{alice.user.id}"
    assert listed["user"] == {"stream": own, "offset": current_offsets([own])[own]}
    assert listed["user"]["offset"] >= 1  # the chat's creation was told to alice
