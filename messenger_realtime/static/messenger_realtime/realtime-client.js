// Messenger realtime web client: the hub's events, recovery over the hub, and REST resync
// as the fallback. Delivery is at-least-once and unordered across retries, so each chat's
// history is kept by Seq, duplicates are dropped by (chatId, seq) and messageId, edits and
// deletes apply idempotently. Every event names its stream and offset: after each
// (re)connect the client asks the hub to `Recover` what it missed since the offsets it
// holds (one round trip, whichever hub process it reaches, however long it was away), and
// resyncs a chat over REST only when the hub answers "resync" for it (docs/hub.md,
// "Recovery"), or when a gap in Seq shows outside a recovery.
//
// The SignalR client is injected (`signalR`: the @microsoft/signalr namespace), so this
// module runs in browsers (the package's browser build) and under Node (its npm import).
//
// The host's REST API is the host's: this module names no path. The host passes `rest`,
// an object of async callbacks (docs/integration.md, "The web client"):
//   listChats()                      -> { user?: { stream, offset }, chats: [{ stream, offset, ... }] }
//   openChat(chatId)                 -> { stream, offset, ... }   the chat's stream, where it stands
//   messagesAfter(chatId, seq, limit)-> [message, ...]           history after `seq`, in Seq order
//   send(chatId, { body, clientMessageId }) -> message           (optional: for send())
//   edit(chatId, messageId, body)    -> message                  (optional: for edit())
//   remove(chatId, messageId)        -> anything                 (optional: for remove())
// A callback that got no answer at all throws an error with `noAnswer: true` (or a
// NetworkError): a send is then tried again with the same clientMessageId; any other
// error is the host's answer.

const PAGE = 200; // messages asked of the host's history per call
// Token renewal (docs/hub.md, "Renewing the token"): a connection holds the token it
// connected with until that token's exp, then the hub closes it. Before then the client
// asks getToken() for a fresh token and hands it to the hub (`RenewToken`), so the
// connection outlives its token without a reconnect and its Recover. It renews when a
// fifth of the token's life is left, but at least RENEW_MARGIN_S before its exp; a
// getToken() that still gives the same token is asked again (RENEW_RETRY_S at the least)
// while there is time. Whatever fails, the hub's Close at exp makes the client reconnect
// with a fresh token, as before renewal existed.
const RENEW_MARGIN_S = 30;
const RENEW_RETRY_S = 5;
// Typing indicators (docs/hub.md, "Typing"): typing(chatId) tells the chat's other
// members this user is composing. The hub publishes at most one per chat per 3 s anyway;
// calling it on every keystroke would still cost a frame each, so the client sends at
// most one call per chat per TYPING_INTERVAL_S (the ones in between are dropped, never
// queued: a late typing indicator is worse than none). A "typing" event { chatId,
// userId, until } says who types where, until when (unix seconds): show it until then.
// Typing is never recovered: after a reconnect nobody is shown typing until they type.
const TYPING_INTERVAL_S = 3;
// Delivery latency (docs/hub.md, "Delivery latency"): the client tells the hub how far it
// holds its streams and how long ago it had the first event it acknowledges
// (`Acknowledge`, no answer awaited), so the hub can measure each live event from its
// commit to here. One call ACKNOWLEDGE_INTERVAL_MS after the first event since the last,
// with the streams that moved: the wait it reports is taken off, so batching costs no
// precision, and a call per few seconds at most costs the hub little. An empty
// Acknowledge right after each (re)connect asks the hub to start measuring.
const ACKNOWLEDGE_INTERVAL_MS = 5000;
const ACKNOWLEDGE_STREAMS = 256; // the most streams one Acknowledge names (the hub's bound)

/** A JWT's `exp` (unix seconds), read without checking it (only to schedule); null if none. */
export function tokenExpiry(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const exp = JSON.parse(globalThis.atob(part)).exp;
    return typeof exp === "number" ? exp : null;
  } catch {
    return null;
  }
}

/** One chat's messages, keyed by Seq. */
export class ChatTimeline {
  constructor(chatId) {
    this.chatId = chatId;
    this.bySeq = new Map();
  }

  /** Insert or update from a REST message or a realtime payload; true if anything changed. */
  apply(message) {
    if (message.chatId !== this.chatId || !Number.isInteger(message.seq)) return false;
    const known = this.bySeq.get(message.seq);
    if (known && known.messageId !== message.messageId) return false; // not ours to replace
    const merged = mergeMessage(known, message);
    if (known && sameMessage(known, merged)) return false; // a duplicate delivery
    this.bySeq.set(message.seq, merged);
    return true;
  }

  /** The highest Seq up to which nothing is missing. */
  contiguousSeq() {
    let seq = 0;
    while (this.bySeq.has(seq + 1)) seq += 1;
    return seq;
  }

  hasGap() {
    return this.bySeq.size > this.contiguousSeq();
  }

  messages() {
    return [...this.bySeq.values()].sort((a, b) => a.seq - b.seq);
  }
}

function mergeMessage(known, incoming) {
  const merged = { ...(known || {}), ...incoming };
  // Deleted wins over anything that arrives later (a retried received/edited event).
  if ((known && known.deletedAt) || incoming.deletedAt) {
    merged.deletedAt = (known && known.deletedAt) || incoming.deletedAt;
    delete merged.body;
    delete merged.fileMeta;
    delete merged.cardText;
  } else if (known && known.editedAt && !incoming.editedAt) {
    merged.body = known.body; // an older, unedited copy must not undo an edit
    merged.editedAt = known.editedAt;
  } else if (known && known.editedAt && incoming.editedAt && incoming.editedAt < known.editedAt) {
    merged.body = known.body;
    merged.editedAt = known.editedAt;
  }
  return merged;
}

function sameMessage(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * Where the client stands on each stream (`chat:{chatId}`, `user:{userId}`): the offset up
 * to which it holds every event, which is what `Recover` asks from. Events may arrive out
 * of order (a retried push); an offset past a hole waits until the hole is filled.
 */
export class StreamOffsets {
  constructor() {
    this.held = new Map(); // stream -> contiguous offset
    this.ahead = new Map(); // stream -> Set of offsets received past a hole
  }

  /** A complete state loaded at `offset` (a REST payload's): never moves back. */
  start(stream, offset) {
    if (!Number.isInteger(offset)) return;
    if ((this.held.get(stream) ?? -1) < offset) this.held.set(stream, offset);
    this.advance(stream);
  }

  /** An event of the stream arrived. A stream first heard of here starts at it. */
  note(stream, offset) {
    if (typeof stream !== "string" || !Number.isInteger(offset)) return;
    if (!this.held.has(stream)) {
      this.held.set(stream, offset);
      return;
    }
    if (offset <= this.held.get(stream)) return;
    if (!this.ahead.has(stream)) this.ahead.set(stream, new Set());
    this.ahead.get(stream).add(offset);
    this.advance(stream);
  }

  advance(stream) {
    const ahead = this.ahead.get(stream);
    if (!ahead) return;
    let offset = this.held.get(stream);
    for (const past of [...ahead]) if (past <= offset) ahead.delete(past);
    while (ahead.delete(offset + 1)) offset += 1;
    this.held.set(stream, offset);
    if (ahead.size === 0) this.ahead.delete(stream);
  }

  forget(stream) {
    this.held.delete(stream);
    this.ahead.delete(stream);
  }

  /** What `Recover` takes: stream -> the offset held. */
  asked() {
    return Object.fromEntries(this.held);
  }
}

const MESSAGE_EVENTS = ["message_received", "message_edited", "message_deleted"];
const OTHER_EVENTS = [
  "read_receipt_updated", "chat_updated", "call_invited", "call_answered", "call_declined",
  "call_missed", "call_cancelled", "call_ended", "conference_invited", "conference_started",
  "conference_ended", "contact_request_received", "blacklist_changed",
];

/** A request that got no answer (fetch itself failed): it may or may not have happened. */
export class NetworkError extends Error {
  constructor(cause) {
    super(`no answer from the server (${cause?.message ?? cause})`);
    this.cause = cause;
    this.noAnswer = true;
  }
}

/** A random UUID (v4) for a send's clientMessageId. */
function newId() {
  if (globalThis.crypto?.randomUUID) return globalThis.crypto.randomUUID();
  const bytes = globalThis.crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * Keeps one user's open chats in sync; dispatches "messages", "state", "unread",
 * "forbidden" (a chat it may not read any more), "typing" and the hub's other events.
 */
export class RealtimeClient extends EventTarget {
  constructor({ signalR, hubUrl = "/hubs/messenger", getToken, rest }) {
    super();
    if (!rest) throw new TypeError("RealtimeClient needs `rest`: the host's REST callbacks");
    this.signalR = signalR;
    this.hubUrl = hubUrl;
    this.getToken = getToken;
    this.rest = rest;
    this.timelines = new Map();
    this.offsets = new StreamOffsets();
    this.recovering = false; // from a (re)connect until its recovery answered
    this.state = "disconnected";
    this.heldUntil = null; // the exp of the token the connection holds (null: none known)
    this.renewal = null; // the timer of the next RenewToken
    this.watched = []; // the users whose presence we watch (asked again after a reconnect)
    this.presence = new Map(); // userId -> { online, lastSeen }
    this.typingSent = new Map(); // chatId -> when typing() last told the hub (ms)
    this.acknowledged = new Map(); // stream -> the offset last acknowledged to the hub
    this.acknowledging = null; // the timer of the next Acknowledge
    this.firstUnacknowledged = null; // when the first event since the last one arrived (ms)
  }

  /** An event of a stream arrived: noted, and acknowledged to the hub soon. */
  noteEvent(stream, offset) {
    this.offsets.note(stream, offset);
    this.firstUnacknowledged ??= Date.now();
    if (this.acknowledging !== null || this.state !== "connected") return;
    this.acknowledging = setTimeout(() => this.acknowledge(), ACKNOWLEDGE_INTERVAL_MS);
  }

  /** Tell the hub the offsets held on the streams that moved since the last time. */
  acknowledge() {
    this.acknowledging = null;
    const moved = {};
    let count = 0;
    for (const [stream, offset] of this.offsets.held) {
      if (this.acknowledged.get(stream) === offset || count === ACKNOWLEDGE_STREAMS) continue;
      moved[stream] = offset;
      count += 1;
    }
    if (count === 0 || this.connection?.state !== this.signalR.HubConnectionState.Connected) return;
    for (const [stream, offset] of Object.entries(moved)) this.acknowledged.set(stream, offset);
    const now = Date.now();
    const waited = Math.min(Math.max(0, now - (this.firstUnacknowledged ?? now)), 60_000);
    this.firstUnacknowledged = null;
    this.connection.send("Acknowledge", moved, waited).catch(() => {}); // a measurement only
  }

  /** After a (re)connect: the hub measures this connection's deliveries from now on. */
  startAcknowledging() {
    this.acknowledged = new Map(this.offsets.held); // held before now: nothing to measure
    this.firstUnacknowledged = null;
    this.connection.send("Acknowledge", {}, 0).catch(() => {}); // a hub without it: no harm
  }

  /**
   * Watch these users' presence (at most 200, each one the hub lets us see): their state
   * now, then a "presence" event per change; the watch is made again after a reconnect.
   * An empty list stops watching. Throws the hub's refusal (a user we may not see).
   */
  async watchPresence(userIds) {
    const states = await this.connection.invoke("WatchPresence", userIds);
    this.watched = [...userIds];
    this.presence = new Map();
    for (const [userId, state] of Object.entries(states)) this.notePresence({ userId, ...state });
    return this.presence;
  }

  notePresence({ userId, online, lastSeen }) {
    this.presence.set(userId, { online, lastSeen });
    this.emit("presence", { userId, online, lastSeen });
  }

  /** The token for a connect: the hub holds it until its exp, so that is noted. */
  async connectToken() {
    const token = await this.getToken();
    this.heldUntil = typeof token === "string" ? tokenExpiry(token) : null;
    return token;
  }

  /** Plan the next renewal of the token the connection holds (none without an exp). */
  scheduleRenewal(lastTry = null) {
    clearTimeout(this.renewal);
    this.renewal = null;
    if (this.heldUntil === null || !this.getToken) return;
    const now = Date.now() / 1000;
    const left = this.heldUntil - now;
    let at = this.heldUntil - Math.max(RENEW_MARGIN_S, left / 5);
    if (lastTry !== null) at = Math.max(at, lastTry + Math.max(RENEW_RETRY_S, left / 3));
    if (at >= this.heldUntil - 1) return; // no time left to try: the hub's Close will come
    this.renewal = setTimeout(() => this.renewToken(), Math.max(0, at - now) * 1000);
  }

  /** Hand the hub a fresh token; the connection's expiry moves to its exp. */
  async renewToken() {
    const tried = Date.now() / 1000;
    try {
      const token = await this.getToken();
      if (this.state !== "connected") return; // a reconnect presents it instead
      const { expiresAt } = await this.connection.invoke("RenewToken", token);
      if (expiresAt > this.heldUntil) {
        this.heldUntil = expiresAt;
        this.scheduleRenewal();
        return;
      }
    } catch (error) {
      // Refused (an older, revoked or another user's token) or no answer: tried again
      // while there is time; the hub's Close at exp is the fallback.
    }
    if (this.state === "connected") this.scheduleRenewal(tried);
  }

  async start() {
    const retryForever = { nextRetryDelayInMilliseconds: (ctx) => Math.min(1000 * (ctx.previousRetryCount + 1), 5000) };
    this.connection = new this.signalR.HubConnectionBuilder()
      .withUrl(this.hubUrl, { accessTokenFactory: () => this.connectToken() })
      .withAutomaticReconnect(retryForever)
      .configureLogging(this.signalR.LogLevel.Warning)
      .build();
    for (const name of MESSAGE_EVENTS) {
      this.connection.on(name, (payload) => {
        this.receive(payload);
        this.noteEvent(payload.stream, payload.offset);
      });
    }
    this.connection.on("presence", (change) => {
      if (this.presence.has(change.userId)) this.notePresence(change);
    });
    for (const name of OTHER_EVENTS) {
      this.connection.on(name, (payload) => {
        this.emit(name, payload);
        this.noteEvent(payload.stream, payload.offset);
      });
    }
    this.connection.on("typing", (payload) => this.emit("typing", payload)); // no offset
    this.connection.onreconnecting(() => {
      this.recovering = true; // live events may come before the recovery fills the hole
      clearTimeout(this.renewal);
      this.setState("reconnecting");
    });
    this.connection.onreconnected(async () => {
      this.setState("connected");
      this.startAcknowledging();
      this.scheduleRenewal(); // the token the reconnect presented
      await this.recover(); // groups are rebuilt server-side; what we missed comes now
      // The watch was the old connection's: ask again (the state now, then changes).
      if (this.watched.length) await this.watchPresence(this.watched).catch(() => {});
    });
    this.connection.onclose(() => {
      clearTimeout(this.renewal);
      clearTimeout(this.acknowledging);
      this.acknowledging = null;
      this.setState("disconnected");
    });
    this.setState("connecting");
    this.recovering = true;
    await this.connection.start();
    this.setState("connected");
    this.startAcknowledging();
    this.scheduleRenewal();
    await this.recover();
  }

  /**
   * Ask the hub for every event missed on the streams we hold, then resync over REST only
   * the chats it cannot recover ("resync"); a stream we may not read any more
   * ("forbidden") is forgotten and its chat closed (a "forbidden" event).
   */
  async recover() {
    const asked = this.offsets.asked();
    let outcomes = {};
    try {
      if (Object.keys(asked).length) outcomes = await this.connection.invoke("Recover", asked);
    } catch (error) {
      // A hub without Recover, or it failed: every open chat over REST, as before.
      this.recovering = false;
      await this.resyncAll();
      return;
    }
    this.recovering = false;
    const resyncs = [];
    for (const [stream, outcome] of Object.entries(outcomes)) {
      const chatId = stream.startsWith("chat:") ? stream.slice(5) : null;
      if (outcome === "forbidden") {
        this.offsets.forget(stream);
        if (chatId) this.timelines.delete(chatId);
        this.emit("forbidden", { stream, chatId });
      } else if (outcome === "resync" && chatId && this.timelines.has(chatId)) {
        this.offsets.forget(stream); // (even one ahead of the server: a restored database)
        resyncs.push(this.openChat(chatId)); // its offset anew, then its messages
      } else if (outcome === "resync") {
        this.offsets.forget(stream); // not open here: start again from the next event
      }
    }
    await Promise.all(resyncs);
    // A gap left after the recovery (a chat opened meanwhile): fill it over REST.
    for (const [chatId, timeline] of this.timelines) if (timeline.hasGap()) this.resync(chatId);
  }

  /** The caller's chats (REST); where each of its streams stands is noted for recovery. */
  async chats() {
    const listed = await this.rest.listChats();
    if (listed.user) this.offsets.start(listed.user.stream, listed.user.offset);
    for (const chat of listed.chats) this.offsets.start(chat.stream, chat.offset);
    return listed.chats;
  }

  async stop() {
    clearTimeout(this.renewal);
    clearTimeout(this.acknowledging);
    this.acknowledging = null;
    if (this.connection) await this.connection.stop();
  }

  /**
   * Start keeping a chat in sync: its stream's offset first, then its history (so the
   * offset is never newer than the history: a recovery from it misses nothing).
   */
  async openChat(chatId) {
    const chat = await this.rest.openChat(chatId);
    this.offsets.start(chat.stream, chat.offset);
    if (!this.timelines.has(chatId)) this.timelines.set(chatId, new ChatTimeline(chatId));
    await this.resync(chatId);
    return this.timelines.get(chatId);
  }

  /**
   * The user is composing in `chatId`: tell the hub, at most once per TYPING_INTERVAL_S
   * per chat, fire and forget (a typing indicator is never retried). Whether it was sent.
   */
  typing(chatId) {
    if (this.state !== "connected") return false;
    const now = Date.now();
    const last = this.typingSent.get(chatId);
    if (last !== undefined && now - last < TYPING_INTERVAL_S * 1000) return false;
    this.typingSent.set(chatId, now);
    this.connection.send("Typing", chatId).catch(() => {}); // refused or lost: nothing to do
    return true;
  }

  timeline(chatId) {
    return this.timelines.get(chatId);
  }

  async resyncAll() {
    await Promise.all([...this.timelines.keys()].map((chatId) => this.resync(chatId)));
  }

  /** Fetch everything after the contiguous Seq (pages of 200) from the host's history. */
  async resync(chatId) {
    const timeline = this.timelines.get(chatId);
    if (!timeline) return;
    let after = timeline.contiguousSeq();
    let changed = false;
    for (;;) {
      const page = await this.rest.messagesAfter(chatId, after, PAGE);
      for (const message of page) changed = timeline.apply(message) || changed;
      if (page.length < PAGE) break;
      after = page[page.length - 1].seq;
    }
    if (changed) this.emit("messages", { chatId });
  }

  receive(payload) {
    const timeline = this.timelines.get(payload.chatId);
    if (!timeline) {
      this.emit("unread", payload);
      return;
    }
    if (timeline.apply(payload)) this.emit("messages", { chatId: payload.chatId });
    // Something before it was missed. During a recovery the hole is being filled.
    if (timeline.hasGap() && !this.recovering) this.resync(payload.chatId);
  }

  /**
   * Post a message. Every send carries a clientMessageId of its own, and a send whose
   * request failed on the way (no answer: a dropped network, a timeout) is tried again
   * with the same id, up to `attempts` times: the server then returns the first message
   * instead of posting a second (docs/api.md).
   */
  async send(chatId, body, { clientMessageId = newId(), attempts = 3 } = {}) {
    for (let attempt = 1; ; attempt += 1) {
      try {
        const message = await this.rest.send(chatId, { body, clientMessageId });
        this.receive(message);
        return message;
      } catch (error) {
        if (error?.noAnswer !== true || attempt >= attempts) throw error;
      }
    }
  }

  async edit(chatId, messageId, body) {
    this.receive(await this.rest.edit(chatId, messageId, body));
  }

  async remove(chatId, messageId) {
    await this.rest.remove(chatId, messageId);
    const known = this.timelines.get(chatId)?.messages().find((m) => m.messageId === messageId);
    if (known) this.receive({ chatId, messageId, seq: known.seq, deletedAt: new Date().toISOString() });
  }

  setState(state) {
    this.state = state;
    this.emit("state", { state });
  }

  emit(type, detail) {
    this.dispatchEvent(Object.assign(new Event(type), { detail }));
  }
}
