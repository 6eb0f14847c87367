// Unit tests of the web client's ordering, dedupe, gap fill and resync (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";

import { ChatTimeline, RealtimeClient, StreamOffsets, tokenExpiry } from "../../messenger_realtime/static/messenger_realtime/realtime-client.js";
import { restCallbacks } from "../../project/messenger/static/messenger/rest.js";

const CHAT = "c1";
const msg = (seq, extra = {}) => ({ chatId: CHAT, messageId: `m${seq}`, seq, body: `b${seq}`, ...extra });

test("a duplicate delivery of the same (chatId, seq) changes nothing", () => {
  const timeline = new ChatTimeline(CHAT);
  assert.equal(timeline.apply(msg(1)), true);
  assert.equal(timeline.apply(msg(1)), false);
  assert.deepEqual(timeline.messages().map((m) => m.seq), [1]);
});

test("history is ordered by Seq whatever the arrival order", () => {
  const timeline = new ChatTimeline(CHAT);
  for (const seq of [3, 1, 2]) timeline.apply(msg(seq));
  assert.deepEqual(timeline.messages().map((m) => m.seq), [1, 2, 3]);
});

test("another message id at a known Seq is refused, other chats are ignored", () => {
  const timeline = new ChatTimeline(CHAT);
  timeline.apply(msg(1));
  assert.equal(timeline.apply({ ...msg(1), messageId: "other" }), false);
  assert.equal(timeline.apply({ ...msg(2), chatId: "elsewhere" }), false);
});

test("edits and deletes are idempotent and a late copy never undoes them", () => {
  const timeline = new ChatTimeline(CHAT);
  timeline.apply(msg(1));
  timeline.apply({ ...msg(1), body: "fixed", editedAt: "2026-11-30T07:00:01Z" });
  timeline.apply(msg(1)); // a retried message_received arrives late
  assert.equal(timeline.messages()[0].body, "fixed");
  timeline.apply({ chatId: CHAT, messageId: "m1", seq: 1, deletedAt: "2026-11-30T07:00:02Z" });
  assert.equal(timeline.apply({ chatId: CHAT, messageId: "m1", seq: 1, deletedAt: "2026-11-30T07:00:02Z" }), false);
  timeline.apply({ ...msg(1), body: "fixed", editedAt: "2026-11-30T07:00:01Z" });
  assert.equal(timeline.messages()[0].body, undefined);
  assert.ok(timeline.messages()[0].deletedAt);
});

test("gaps are detected from the contiguous Seq", () => {
  const timeline = new ChatTimeline(CHAT);
  timeline.apply(msg(1));
  timeline.apply(msg(3));
  assert.equal(timeline.contiguousSeq(), 1);
  assert.equal(timeline.hasGap(), true);
  timeline.apply(msg(2));
  assert.equal(timeline.hasGap(), false);
});

class FakeConnection {
  constructor() {
    this.handlers = {};
    this.state = "Connected";
    this.sent = []; // [method, argument] of each send()
  }
  async send(method, ...args) { this.sent.push([method, ...args]); }
  on(name, handler) { this.handlers[name] = handler; }
  onreconnecting(handler) { this.reconnecting = handler; }
  onreconnected(handler) { this.reconnected = handler; }
  onclose(handler) { this.closed = handler; }
  async start() {}
  async stop() {}
}

function fakeSignalR(connection) {
  const builder = {
    withUrl: () => builder, withAutomaticReconnect: () => builder,
    configureLogging: () => builder, build: () => connection,
  };
  return {
    HubConnectionBuilder: function () { return builder; },
    LogLevel: { Warning: 3 },
    HubConnectionState: { Connected: "Connected" },
  };
}

function server(messages, offset = 0) {
  const calls = [];
  const fetchImpl = async (url) => {
    calls.push(url);
    if (!url.includes("/messages")) {
      const chat = { chatId: CHAT, stream: `chat:${CHAT}`, offset };
      return { ok: true, status: 200, json: async () => chat };
    }
    const after = Number(new URL(url, "http://x").searchParams.get("afterSeq"));
    const page = messages.filter((m) => m.seq > after).slice(0, 200);
    return { ok: true, status: 200, json: async () => ({ messages: page }) };
  };
  return { calls, fetchImpl };
}

test("a gap in realtime events is filled from list-messages", async () => {
  const connection = new FakeConnection();
  const history = [msg(1), msg(2), msg(3)];
  const { calls, fetchImpl } = server(history);
  const client = new RealtimeClient({ signalR: fakeSignalR(connection), getToken: () => "t", rest: restCallbacks({ getToken: () => "t", fetchImpl }) });
  await client.start();
  await client.openChat(CHAT);
  history.push(msg(4), msg(5));
  connection.handlers.message_received(msg(5)); // 4 was lost
  await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(client.timeline(CHAT).messages().map((m) => m.seq), [1, 2, 3, 4, 5]);
  assert.ok(calls.at(-1).includes("afterSeq=3"));
});

test("after a reconnect every open chat is resynced", async () => {
  const connection = new FakeConnection();
  const history = [msg(1)];
  const { fetchImpl } = server(history);
  const client = new RealtimeClient({ signalR: fakeSignalR(connection), getToken: () => "t", rest: restCallbacks({ getToken: () => "t", fetchImpl }) });
  const states = [];
  client.addEventListener("state", (e) => states.push(e.detail.state));
  await client.start();
  await client.openChat(CHAT);
  connection.reconnecting();
  history.push(msg(2), msg(3)); // sent while we were away
  await connection.reconnected();
  assert.deepEqual(client.timeline(CHAT).messages().map((m) => m.seq), [1, 2, 3]);
  assert.deepEqual(states, ["connecting", "connected", "reconnecting", "connected"]);
});

test("a send that got no answer is tried again with the same clientMessageId", async () => {
  const bodies = [];
  let failures = 1;
  const fetchImpl = async (url, init) => {
    bodies.push(JSON.parse(init.body));
    if (failures-- > 0) throw new TypeError("network down"); // as fetch() does offline
    return { ok: true, status: 201, json: async () => ({ ...msg(1), body: "hi" }) };
  };
  const client = new RealtimeClient({ signalR: fakeSignalR(new FakeConnection()), getToken: () => "t", rest: restCallbacks({ getToken: () => "t", fetchImpl }) });
  const sent = await client.send(CHAT, "hi");
  assert.equal(sent.messageId, "m1");
  assert.equal(bodies.length, 2);
  assert.match(bodies[0].clientMessageId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(bodies[1].clientMessageId, bodies[0].clientMessageId);
  const other = [];
  await client.send(CHAT, "again", {}).then(() => other.push(bodies.at(-1).clientMessageId));
  assert.notEqual(other[0], bodies[0].clientMessageId); // a new send, a new id
});

test("a send the server refused is not retried", async () => {
  let calls = 0;
  const fetchImpl = async () => {
    calls += 1;
    return { ok: false, status: 403, json: async () => ({ error: "blocked" }) };
  };
  const client = new RealtimeClient({ signalR: fakeSignalR(new FakeConnection()), getToken: () => "t", rest: restCallbacks({ getToken: () => "t", fetchImpl }) });
  await assert.rejects(client.send(CHAT, "hi"), /blocked/);
  assert.equal(calls, 1);
});

test("a stream's offset is the contiguous one, whatever the arrival order", () => {
  const offsets = new StreamOffsets();
  offsets.start("chat:a", 4);
  offsets.note("chat:a", 6); // 5 not yet here
  assert.deepEqual(offsets.asked(), { "chat:a": 4 });
  offsets.note("chat:a", 5);
  assert.deepEqual(offsets.asked(), { "chat:a": 6 });
  offsets.start("chat:a", 2); // an older REST load never moves it back
  offsets.note("user:u", 9); // first heard of here: from here on
  assert.deepEqual(offsets.asked(), { "chat:a": 6, "user:u": 9 });
});

/** A connection whose hub answers Recover: it sends `missed` first, as the hub does. */
class RecoveringConnection extends FakeConnection {
  constructor(answer) {
    super();
    this.answer = answer;
    this.asked = [];
  }
  async invoke(method, argument) {
    assert.equal(method, "Recover");
    this.asked.push(argument);
    return this.answer(this.handlers, argument);
  }
}

const event = (seq, offset) => ({ ...msg(seq), stream: `chat:${CHAT}`, offset });

test("after a reconnect what was missed comes through Recover, with no REST call", async () => {
  let missed = [];
  const connection = new RecoveringConnection((handlers, asked) => {
    for (const e of missed) handlers.message_received(e);
    return Object.fromEntries(Object.keys(asked).map((stream) => [stream, "recovered"]));
  });
  const { calls, fetchImpl } = server([msg(1)], 10);
  const client = new RealtimeClient({ signalR: fakeSignalR(connection), getToken: () => "t", rest: restCallbacks({ getToken: () => "t", fetchImpl }) });
  await client.start();
  await client.openChat(CHAT);
  connection.handlers.message_received(event(2, 11)); // live
  connection.reconnecting();
  const before = calls.length;
  missed = [event(3, 12), event(4, 13)]; // in offset order, as the hub sends
  connection.handlers.message_received(event(5, 14)); // live, on the new connection, first
  await connection.reconnected();
  assert.deepEqual(connection.asked.at(-1), { [`chat:${CHAT}`]: 11 });
  assert.deepEqual(client.timeline(CHAT).messages().map((m) => m.seq), [1, 2, 3, 4, 5]);
  assert.equal(calls.length, before); // not one REST request
  assert.deepEqual(client.offsets.asked(), { [`chat:${CHAT}`]: 14 });
});

test("only a chat the hub says to resync goes to REST; a forbidden one is closed", async () => {
  const OTHER = "c2";
  let outcomes = {};
  const connection = new RecoveringConnection(() => outcomes);
  const history = [msg(1)];
  const { calls, fetchImpl } = server(history, 1);
  const client = new RealtimeClient({ signalR: fakeSignalR(connection), getToken: () => "t", rest: restCallbacks({ getToken: () => "t", fetchImpl }) });
  const forbidden = [];
  client.addEventListener("forbidden", (e) => forbidden.push(e.detail));
  await client.start();
  await client.openChat(CHAT);
  client.offsets.start(`chat:${OTHER}`, 3);
  history.push(msg(2));
  outcomes = { [`chat:${CHAT}`]: "resync", [`chat:${OTHER}`]: "forbidden" };
  connection.reconnecting();
  const before = calls.length;
  await connection.reconnected();
  assert.deepEqual(calls.slice(before), [`/api/chats/${CHAT}`, `/api/chats/${CHAT}/messages?afterSeq=1&limit=200`]);
  assert.deepEqual(client.timeline(CHAT).messages().map((m) => m.seq), [1, 2]);
  assert.deepEqual(forbidden, [{ stream: `chat:${OTHER}`, chatId: OTHER }]);
  assert.deepEqual(Object.keys(client.offsets.asked()), [`chat:${CHAT}`]);
});

test("the module names no REST path: the host's callbacks are all it calls", async () => {
  const { readFile } = await import("node:fs/promises");
  const source = await readFile(new URL("../../messenger_realtime/static/messenger_realtime/realtime-client.js", import.meta.url), "utf8");
  assert.ok(!/["'`]\/api\//.test(source), "realtime-client.js must not name the host's REST paths");
  assert.throws(() => new RealtimeClient({ signalR: fakeSignalR(new FakeConnection()), getToken: () => "t" }), /needs `rest`/);

  const connection = new FakeConnection();
  const history = [msg(1), msg(2)];
  const asked = [];
  const rest = {
    listChats: async () => ({ chats: [] }),
    openChat: async (chatId) => ({ stream: `chat:${chatId}`, offset: 2 }),
    messagesAfter: async (chatId, seq, limit) => {
      asked.push([chatId, seq, limit]);
      return history.filter((m) => m.seq > seq);
    },
  };
  const client = new RealtimeClient({ signalR: fakeSignalR(connection), getToken: () => "t", rest });
  await client.start();
  await client.openChat(CHAT);
  history.push(msg(3), msg(4));
  connection.handlers.message_received(msg(4)); // 3 was lost: the host's history fills it
  await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(client.timeline(CHAT).messages().map((m) => m.seq), [1, 2, 3, 4]);
  assert.deepEqual(asked, [[CHAT, 0, 200], [CHAT, 2, 200]]);
});

// -- token renewal ----------------------------------------------------------------------

const NOW = 1_000_000; // unix seconds on the mocked clock

function jwtExpiring(exp, n = 0) {
  const claims = Buffer.from(JSON.stringify({ exp, n })).toString("base64url");
  return `e30.${claims}.signature`;
}

/** A SignalR whose connection takes its token from accessTokenFactory, as the real one. */
function renewingSignalR(connection) {
  const builder = {
    withUrl: (_url, options) => { connection.factory = options.accessTokenFactory; return builder; },
    withAutomaticReconnect: () => builder, configureLogging: () => builder, build: () => connection,
  };
  connection.start = async () => { connection.presented = await connection.factory(); };
  return {
    HubConnectionBuilder: function () { return builder; },
    LogLevel: { Warning: 3 },
    HubConnectionState: { Connected: "Connected" },
  };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));

async function advance(t, seconds) {
  t.mock.timers.tick(seconds * 1000);
  for (let i = 0; i < 5; i += 1) await flush();
}

function renewingClient(tokens, answer) {
  const connection = new FakeConnection();
  const renewed = [];
  connection.invoke = async (name, token) => {
    renewed.push(token);
    return answer(token);
  };
  const { fetchImpl } = server([]);
  let given = 0;
  const getToken = () => tokens[Math.min(given++, tokens.length - 1)];
  const client = new RealtimeClient({ signalR: renewingSignalR(connection), getToken, rest: restCallbacks({ getToken, fetchImpl }) });
  return { client, connection, renewed };
}

test("a token's exp is read to schedule its renewal; a token without one gives null", () => {
  assert.equal(tokenExpiry(jwtExpiring(NOW + 60)), NOW + 60);
  assert.equal(tokenExpiry("not a jwt"), null);
});

test("the client renews its token before it expires, then the next one before its own", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"], now: NOW * 1000 });
  const tokens = [jwtExpiring(NOW + 300), jwtExpiring(NOW + 600), jwtExpiring(NOW + 900)];
  const { client, connection, renewed } = renewingClient(tokens, (token) => ({ expiresAt: tokenExpiry(token) }));
  await client.start();
  assert.equal(connection.presented, tokens[0]);
  await advance(t, 239); // a fifth of 300 s left is at 240 s
  assert.deepEqual(renewed, []);
  await advance(t, 1);
  assert.deepEqual(renewed, [tokens[1]]);
  await advance(t, 528 - 240 - 1); // held until 600: renewed with 72 s (a fifth) left
  assert.deepEqual(renewed, [tokens[1]]);
  await advance(t, 1);
  assert.deepEqual(renewed, [tokens[1], tokens[2]]);
  await client.stop();
});

test("a refused renewal is tried again while there is time, and never after a close", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"], now: NOW * 1000 });
  const tokens = [jwtExpiring(NOW + 100), jwtExpiring(NOW + 400)];
  const { client, connection, renewed } = renewingClient(tokens, () => {
    throw new Error("HubException: token revoked; sign in again");
  });
  await client.start();
  await advance(t, 70); // 30 s before exp (the margin)
  assert.equal(renewed.length, 1);
  await advance(t, 10); // tried again 10 s later (a third of what was left)
  assert.equal(renewed.length, 2);
  connection.closed(); // the hub closed it: nothing more is tried on it
  await advance(t, 100);
  assert.equal(renewed.length, 2);
});

test("a getToken that still gives the connection's token is asked again, not in a loop", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"], now: NOW * 1000 });
  const same = jwtExpiring(NOW + 100);
  const { client, renewed } = renewingClient([same], (token) => ({ expiresAt: tokenExpiry(token) }));
  await client.start();
  for (let second = 0; second < 99; second += 1) await advance(t, 1);
  assert.ok(renewed.length >= 2 && renewed.length <= 5, `${renewed.length} renewals`);
  await client.stop();
});

// -- presence -----------------------------------------------------------------------------

test("presence: the state watched, then each change, and the watch made again after a reconnect", async () => {
  const connection = new FakeConnection();
  const asked = [];
  let bobOnline = false;
  connection.invoke = async (name, users) => {
    asked.push([name, users]);
    return Object.fromEntries(users.map((u) => [u, { online: u === "bob" && bobOnline, lastSeen: null }]));
  };
  const { fetchImpl } = server([]);
  const client = new RealtimeClient({ signalR: fakeSignalR(connection), getToken: () => "t", rest: restCallbacks({ getToken: () => "t", fetchImpl }) });
  const seen = [];
  client.addEventListener("presence", (e) => seen.push(e.detail));
  await client.start();
  await client.watchPresence(["bob", "carol"]);
  assert.deepEqual(client.presence.get("bob"), { online: false, lastSeen: null });
  connection.handlers.presence({ userId: "bob", online: true, lastSeen: null });
  connection.handlers.presence({ userId: "dave", online: true, lastSeen: null }); // not watched
  assert.deepEqual(client.presence.get("bob"), { online: true, lastSeen: null });
  assert.equal(client.presence.has("dave"), false);
  bobOnline = true;
  connection.reconnecting();
  await connection.reconnected();
  assert.deepEqual(asked.at(-1), ["WatchPresence", ["bob", "carol"]]);
  assert.deepEqual(seen.map((s) => [s.userId, s.online]), [["bob", false], ["carol", false], ["bob", true], ["bob", true], ["carol", false]]);
});


// -- typing indicators ------------------------------------------------------------------

test("typing() tells the hub at most once per chat per interval; the hub's typing is emitted", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"], now: NOW * 1000 });
  const connection = new FakeConnection();
  const sent = [];
  // What typing() sends (each (re)connect's Acknowledge is another test's).
  connection.send = async (name, ...args) => { if (name !== "Acknowledge") sent.push([name, ...args]); };
  const { fetchImpl } = server([]);
  const client = new RealtimeClient({ signalR: fakeSignalR(connection), getToken: () => "t", rest: restCallbacks({ getToken: () => "t", fetchImpl }) });
  assert.equal(client.typing(CHAT), false); // not connected yet: nothing to tell
  await client.start();
  const keystrokes = [];
  for (let i = 0; i < 20; i += 1) keystrokes.push(client.typing(CHAT));
  assert.equal(client.typing("c2"), true); // another chat has its own interval
  assert.deepEqual(keystrokes.filter(Boolean).length, 1);
  assert.deepEqual(sent, [["Typing", CHAT], ["Typing", "c2"]]);
  t.mock.timers.tick(2999);
  assert.equal(client.typing(CHAT), false);
  t.mock.timers.tick(1);
  assert.equal(client.typing(CHAT), true);
  assert.equal(sent.length, 3);

  const shown = [];
  client.addEventListener("typing", (event) => shown.push(event.detail));
  const payload = { chatId: CHAT, userId: "u2", until: NOW + 5 };
  connection.handlers.typing(payload);
  assert.deepEqual(shown, [payload]);
  assert.deepEqual(client.offsets.asked(), {}); // never an offset: typing is not recovered
});

test("a refused or lost typing call is dropped quietly", async () => {
  const connection = new FakeConnection();
  connection.send = async () => { throw new Error("HubException: not a member of this chat"); };
  const { fetchImpl } = server([]);
  const client = new RealtimeClient({ signalR: fakeSignalR(connection), getToken: () => "t", rest: restCallbacks({ getToken: () => "t", fetchImpl }) });
  await client.start();
  assert.equal(client.typing(CHAT), true);
  await new Promise((resolve) => setImmediate(resolve)); // an unhandled rejection fails the run
});

test("received offsets are acknowledged five seconds after the first, with that wait", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"], now: NOW * 1000 });
  const connection = new FakeConnection();
  const { fetchImpl } = server([]);
  const client = new RealtimeClient({ signalR: fakeSignalR(connection), getToken: () => "t", rest: restCallbacks({ getToken: () => "t", fetchImpl }) });
  await client.start();
  assert.deepEqual(connection.sent, [["Acknowledge", {}, 0]]); // measure this connection from now
  const stream = `chat:${CHAT}`;
  connection.handlers.message_received({ ...msg(1), stream, offset: 1 });
  t.mock.timers.tick(300);
  connection.handlers.message_received({ ...msg(2), stream, offset: 2 });
  connection.handlers.read_receipt_updated({ chatId: CHAT, stream: "user:u1", offset: 7 });
  t.mock.timers.tick(4699);
  assert.equal(connection.sent.length, 1); // batched
  t.mock.timers.tick(1);
  // The offsets held, and how long ago it had the first of the events: the whole 5 s.
  assert.deepEqual(connection.sent.at(-1), ["Acknowledge", { [stream]: 2, "user:u1": 7 }, 5000]);
  t.mock.timers.tick(20_000);
  assert.equal(connection.sent.length, 2); // nothing new: nothing sent
  connection.handlers.message_received({ ...msg(3), stream, offset: 3 });
  t.mock.timers.tick(5000);
  assert.deepEqual(connection.sent.at(-1), ["Acknowledge", { [stream]: 3 }, 5000]); // moved only
  await client.stop();
});
