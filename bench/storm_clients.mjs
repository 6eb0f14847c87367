// One client process of bench/storm.py and bench/recovery.py: many official
// @microsoft/signalr clients, each with the JavaScript client's DEFAULT reconnect policy
// (withAutomaticReconnect(): 0, 2, 10 and 30 s, then it gives up) or, with
// "retryForever", the web module's (1, 2, ... 5 s, forever), keeping its chats' timelines
// with the web module's ChatTimeline. After every reconnect it either resyncs each chat
// over REST (and on a gap), as the web module did before recovery, or, with "recover",
// does what the web module does now: one `Recover` for every chat's stream from the
// offset it holds (StreamOffsets), and REST only for a chat the hub answers "resync".
//
// Usage: node bench/storm_clients.mjs CONFIG_JSON_FILE
//   {"hub": "http://127.0.0.1:PORT", "concurrency": 50, "recover": false,
//    "retryForever": false, "clients": [{"token": "...", "chats": ["chat id", ...]}, ...]}
// Prints one JSON object per line: {"type": "started", ...} once every client's first
// start settled, then {"type": "tick", ...} every second (states, the lags of the
// message_received events heard since the last tick). Reads commands from stdin:
// {"cmd": "report", "lastSeq": {chatId: seq}} -> {"type": "report", ...} (what each
// client's timelines miss of 1..lastSeq), {"cmd": "stop"}.
import * as signalR from "@microsoft/signalr";
import { readFileSync } from "node:fs";
import * as readline from "node:readline";

import { ChatTimeline, StreamOffsets } from "../messenger_realtime/static/messenger_realtime/realtime-client.js";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const counts = {
  reconnects: 0, resyncs: 0, resyncFailures: 0, resynced: 0, events: 0, unhandled: 0,
  restRequests: 0, recoveries: 0, recoverFailures: 0, recoverResyncs: 0, recovered: 0,
};
let lags = []; // ms from the message's sentAt to its receipt, since the last tick
let recoverMs = [];
const failuresSeen = new Set(); // each kind of REST failure, said once on stderr // ms each Recover took (invoke to completion), since the last tick
const retryForever = { nextRetryDelayInMilliseconds: (ctx) => Math.min(1000 * (ctx.previousRetryCount + 1), 5000) };

class Client {
  constructor({ token, chats }) {
    this.token = token;
    this.state = "connecting";
    this.timelines = new Map(chats.map((id) => [id, new ChatTimeline(id)]));
    this.offsets = new StreamOffsets();
    for (const id of chats) this.offsets.start(`chat:${id}`, 0); // fresh chats
    this.recovering = false;
    this.resyncing = new Map(); // chat -> a resync in flight (one at a time per chat)
    const builder = new signalR.HubConnectionBuilder()
      .withUrl(`${config.hub}/hubs/messenger`, { accessTokenFactory: () => token });
    this.connection = (config.retryForever
      ? builder.withAutomaticReconnect(retryForever)
      : builder.withAutomaticReconnect()) // the default policy: [0, 2000, 10000, 30000], then null
      .configureLogging(signalR.LogLevel.None)
      .build();
    this.connection.on("message_received", (payload) => this.receive(payload));
    this.connection.onreconnecting(() => {
      this.state = "reconnecting";
      this.recovering = Boolean(config.recover);
    });
    this.connection.onreconnected(() => {
      this.state = "connected";
      counts.reconnects += 1;
      if (config.recover) this.recover();
      else for (const chat of this.timelines.keys()) this.resync(chat);
    });
    this.connection.onclose(() => {
      this.state = "closed"; // the policy ran out: it gave up
    });
  }

  async start() {
    try {
      await this.connection.start();
      this.state = "connected";
    } catch (error) {
      this.state = "failed";
      this.error = String(error);
    }
  }

  receive(payload) {
    counts.events += 1;
    if (payload.sentAt) lags.push(Date.now() - Date.parse(payload.sentAt));
    this.offsets.note(payload.stream, payload.offset);
    const timeline = this.timelines.get(payload.chatId);
    if (!timeline) return;
    if (timeline.apply(payload) && this.recovering) counts.recovered += 1;
    if (timeline.hasGap() && !this.recovering) this.resync(payload.chatId);
  }

  async recover() {
    const began = Date.now();
    let outcomes;
    try {
      outcomes = await this.connection.invoke("Recover", this.offsets.asked());
    } catch {
      counts.recoverFailures += 1;
      this.recovering = false;
      for (const chat of this.timelines.keys()) this.resync(chat);
      return;
    }
    this.recovering = false;
    counts.recoveries += 1;
    recoverMs.push(Date.now() - began);
    for (const [stream, outcome] of Object.entries(outcomes)) {
      if (outcome === "recovered") continue;
      counts.recoverResyncs += 1;
      this.resync(stream.slice("chat:".length));
    }
    for (const [chat, timeline] of this.timelines) if (timeline.hasGap()) this.resync(chat);
  }

  resync(chat) {
    const running = this.resyncing.get(chat);
    if (running) {
      running.again = true; // once more after it, for what arrived meanwhile
      return;
    }
    const job = { again: false };
    this.resyncing.set(chat, job);
    (async () => {
      do {
        job.again = false;
        counts.resyncs += 1;
        try {
          await this.fetchAfter(chat);
        } catch (error) {
          counts.resyncFailures += 1;
          const text = String(error?.cause ?? error);
          if (!failuresSeen.has(text)) process.stderr.write(`resync failed: ${text}\n`);
          failuresSeen.add(text);
        }
      } while (job.again);
      this.resyncing.delete(chat);
    })();
  }

  async fetchAfter(chat) {
    const timeline = this.timelines.get(chat);
    let after = timeline.contiguousSeq();
    for (;;) {
      counts.restRequests += 1;
      const response = await fetch(`${config.hub}/api/chats/${chat}/messages?afterSeq=${after}&limit=200`, {
        headers: { Authorization: `Bearer ${this.token}` },
      });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const page = await response.json();
      for (const message of page.messages) if (timeline.apply(message)) counts.resynced += 1;
      if (page.messages.length < 200) return;
      after = page.messages[page.messages.length - 1].seq;
    }
  }

  missing(lastSeq) {
    let missing = 0;
    for (const [chat, timeline] of this.timelines) {
      for (let seq = 1; seq <= (lastSeq[chat] ?? 0); seq += 1) if (!timeline.bySeq.has(seq)) missing += 1;
    }
    return missing;
  }
}

// A rejection nobody awaited, or an exception thrown from an event handler (the
// official client throws one from its Server-Sent Events transport's onclose when a
// connect is refused while it is still connecting), would end this process and its
// clients with it; in a browser it is only logged. Count it and say what it was, once
// per kind.
const unhandledSeen = new Set();
const unhandled = (kind) => (reason) => {
  counts.unhandled += 1;
  const text = String(reason?.stack ?? reason);
  if (!unhandledSeen.has(text)) process.stderr.write(`${kind}: ${text}\n`);
  unhandledSeen.add(text);
};
process.on("unhandledRejection", unhandled("unhandled rejection"));
process.on("uncaughtException", unhandled("uncaught exception"));

const clients = config.clients.map((c) => new Client(c));

function census() {
  const states = { connected: 0, connecting: 0, reconnecting: 0, closed: 0, failed: 0 };
  for (const client of clients) states[client.state] += 1;
  return states;
}

setInterval(() => {
  print({ type: "tick", t: Date.now() / 1000, ...census(), ...counts, lags, recoverMs });
  lags = [];
  recoverMs = [];
}, 1000);

// Every client's first start, `concurrency` at a time.
let next = 0;
const starter = async () => {
  while (next < clients.length) await clients[next++].start();
};
await Promise.all(Array.from({ length: config.concurrency }, starter));
const errors = [...new Set(clients.filter((c) => c.error).map((c) => c.error))].slice(0, 3);
print({ type: "started", ...census(), errors });

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  const command = JSON.parse(line);
  if (command.cmd === "report") {
    const missing = clients.map((c) => c.missing(command.lastSeq));
    print({
      type: "report",
      ...census(),
      ...counts,
      missing: missing.reduce((a, b) => a + b, 0),
      clientsMissing: missing.filter((m) => m > 0).length,
      resyncsInFlight: clients.reduce((n, c) => n + c.resyncing.size, 0),
    });
  } else if (command.cmd === "stop") {
    await Promise.all(clients.map((c) => c.connection.stop().catch(() => {})));
    process.exit(0);
  }
}
