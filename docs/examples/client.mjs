// A complete client of the hub with the official SignalR client under Node: it connects,
// prints every event, and after a reconnect recovers what it missed with `Recover`, from
// the offsets it holds per stream (docs/hub.md, "Recovery").
//
//   node docs/examples/client.mjs HUB_URL TOKEN CHAT_ID
//   HUB_URL=http://127.0.0.1:8000/hubs/messenger TOKEN=... CHAT_ID=... node docs/examples/client.mjs
//
// TOKEN: `python manage.py realtime_token --username demo-alice`; CHAT_ID: one of that
// user's chats (`python manage.py seed_demo` prints the demo users and chats). Needs
// `npm install @microsoft/signalr` (this repository's package.json has it). Output: one
// line per event, `<event> <stream>@<offset> <payload as JSON>`, and one per connection
// change and recovery outcome. Ctrl-C stops it.
import * as signalR from "@microsoft/signalr";

const [hubUrl, token, chatId] = [0, 1, 2].map(
  (i) => process.argv[2 + i] ?? process.env[["HUB_URL", "TOKEN", "CHAT_ID"][i]],
);
if (!hubUrl || !token || !chatId) {
  console.error("usage: node docs/examples/client.mjs HUB_URL TOKEN CHAT_ID (or those env variables)");
  process.exit(2);
}
// This project's REST API (docs/api.md) beside the hub; a host's own API may live elsewhere.
const api = process.env.API_URL ?? new URL("/api", hubUrl).href;

async function rest(path) {
  const response = await fetch(api + path, { headers: { Authorization: `Bearer ${token}` } });
  if (!response.ok) throw new Error(`GET ${api}${path}: ${response.status} ${await response.text()}`);
  return response.json();
}

// Where we stand on each stream (`chat:{chatId}`, `user:{userId}`): the last offset held
// with nothing missing before it. An event past a hole (a retried push may come late) is
// kept aside until the hole fills, so a recovery asks again for what is still missing.
const held = new Map(); // stream -> offset
const ahead = new Map(); // stream -> Set of offsets received past a hole

function isNew(stream, offset) {
  if (!held.has(stream)) held.set(stream, offset - 1); // a stream we had not loaded
  const seen = ahead.get(stream) ?? new Set();
  if (offset <= held.get(stream) || seen.has(offset)) return false; // a duplicate
  seen.add(offset);
  let at = held.get(stream);
  while (seen.delete(at + 1)) at += 1;
  held.set(stream, at);
  ahead.set(stream, seen);
  return true;
}

// Load the chat (and our own stream) over REST first: each payload names its stream and
// the offset it was read at, so recovering from there misses nothing.
async function load() {
  const chat = await rest(`/chats/${chatId}`);
  const { user } = await rest("/chats");
  for (const { stream, offset } of [chat, user]) {
    held.set(stream, offset);
    ahead.delete(stream);
  }
  console.log(`loaded ${chat.stream}@${chat.offset} (${chat.title || chat.kind}, lastSeq ${chat.lastSeq})`);
}

const EVENTS = [
  "message_received", "message_edited", "message_deleted", "read_receipt_updated",
  "chat_updated", "contact_request_received", "contact_request_accepted", "contact_removed",
  "call_invited", "call_answered", "call_declined", "call_missed", "call_cancelled",
  "call_ended", "conference_invited", "conference_started", "conference_ended",
  "conference_participant_joined", "conference_participant_left", "recording_started",
  "recording_stopped", "recording_available", "recording_failed", "screen_share_started",
  "screen_share_stopped", "blacklist_changed",
];

// Reconnect for as long as it takes, up to 30 s apart. (A real client also asks its
// identity provider for a fresh token in accessTokenFactory: the hub closes a
// connection when its token expires, and refuses an expired one on reconnect.)
const forever = { nextRetryDelayInMilliseconds: (r) => Math.min(1000 * 2 ** r.previousRetryCount, 30000) };

const connection = new signalR.HubConnectionBuilder()
  .withUrl(hubUrl, { accessTokenFactory: () => token })
  .withAutomaticReconnect(forever)
  .configureLogging(signalR.LogLevel.Warning)
  .build();
for (const name of EVENTS) {
  connection.on(name, (event) => {
    // Every event names its stream and offset; delivery is at-least-once: drop duplicates.
    if (isNew(event.stream, event.offset)) {
      console.log(`${name} ${event.stream}@${event.offset} ${JSON.stringify(event)}`);
    }
  });
}
// Groups are rebuilt server-side; what was missed comes in one round trip, from the
// offset held on each stream ("resync" for a stream: fetch that chat over REST).
async function recover() {
  const outcomes = await connection.invoke("Recover", Object.fromEntries(held));
  for (const [stream, outcome] of Object.entries(outcomes)) {
    console.log(`recover ${stream}: ${outcome}`);
    if (outcome === "resync") await load(); // too far behind: reload over REST
    if (outcome === "forbidden") held.delete(stream); // no longer ours
  }
}
connection.onreconnected(async () => {
  console.log("reconnected");
  await recover().catch((error) => console.log(`recover failed: ${error}`));
});
connection.onreconnecting((error) => console.log(`reconnecting: ${error ?? "closed by the server"}`));
connection.onclose((error) => {
  console.log(`closed: ${error ?? "stopped"}`);
  process.exit(error ? 1 : 0);
});

await load();
await connection.start();
console.log(`connected to ${hubUrl}`);
await recover(); // what happened between the REST load and the connect
process.on("SIGINT", () => connection.stop());
process.on("SIGTERM", () => connection.stop());
