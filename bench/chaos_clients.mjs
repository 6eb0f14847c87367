// The chaos soak's official clients (bench/chaos.py): many @microsoft/signalr clients in
// one Node process, each logging what the checker reads (bench/chaos_checker.py) to one
// JSON-lines file, with the records of bench/chaos_clients.py (the raw clients).
//
// Usage: node bench/chaos_clients.mjs CONFIG_JSON_FILE
//   {"log": path, "targets": [hub event names], "clients": [{"id", "user", "token",
//    "hub": "http://127.0.0.1:PORT", "msgpack": bool, "stateful": bool}, ...]}
// Each client behaves as the web module does: it loads its chats over REST, connects
// (JSON or MessagePack; with stateful reconnect or not) with a retry-forever policy,
// and after every (re)connect invokes `Recover` with the contiguous offset it holds of
// each stream (StreamOffsets); "resync" -> the stream is loaded over REST again,
// "forbidden" -> forgotten. A chat_updated on its own user stream saying it joined a
// chat loads that chat; one saying it left forgets it. A stateful resume is invisible
// here (no record): the client lost nothing. The official client hides the hub's Close,
// so a connection that ends is followed by {"k": "connected"} only; the checker then
// counts any gap it left as silent (stricter than for the raw clients).
// Commands on stdin: {"cmd": "census"} -> {"connected": n, "clients": n}, {"cmd": "stop"}.
import * as signalR from "@microsoft/signalr";
import { MessagePackHubProtocol } from "@microsoft/signalr-protocol-msgpack";
import { createWriteStream, readFileSync } from "node:fs";
import * as readline from "node:readline";

import { StreamOffsets } from "../messenger_realtime/static/messenger_realtime/realtime-client.js";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const log = createWriteStream(config.log, { flags: "a" });
const retryForever = { nextRetryDelayInMilliseconds: (ctx) => Math.min(500 * (ctx.previousRetryCount + 1), 3000) };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

class Client {
  constructor(spec) {
    Object.assign(this, spec);
    this.offsets = new StreamOffsets();
    this.connected = false;
    let builder = new signalR.HubConnectionBuilder()
      .withUrl(`${spec.hub}/hubs/messenger`, { accessTokenFactory: () => spec.token })
      .withAutomaticReconnect(retryForever)
      .configureLogging(signalR.LogLevel.None);
    if (spec.stateful) builder = builder.withStatefulReconnect();
    if (spec.msgpack) builder = builder.withHubProtocol(new MessagePackHubProtocol());
    this.connection = builder.build();
    for (const target of config.targets) this.connection.on(target, (payload) => this.event(target, payload));
    this.connection.onreconnecting((error) => {
      this.connected = false;
      // The hub's Close with allowReconnect reaches the client as this error (the
      // official client then reconnects by itself): the hub's word, as the raw clients
      // log it. A dropped socket gives another error.
      if (String(error?.message ?? "").startsWith("Server returned an error on close")) {
        this.record("closed", { a: true });
      }
    });
    this.connection.onreconnected(() => this.opened());
    this.connection.onclose(() => {
      this.connected = false;
      this.record("closed", { a: false });
      if (!this.stopping) this.start(); // the policy never gives up; a refusal might
    });
  }

  record(kind, fields = {}) {
    log.write(JSON.stringify({ c: this.id, k: kind, t: Date.now() / 1000, ...fields }) + "\n");
  }

  async get(path) {
    const response = await fetch(`${this.hub}${path}`, { headers: { Authorization: `Bearer ${this.token}` } });
    if (response.status === 404) return null;
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    return response.json();
  }

  async load(chat) {
    for (let attempt = 0; attempt < 1000; attempt += 1) {
      try {
        if (chat === undefined) {
          const page = await this.get("/api/chats");
          for (const item of [page.user, ...page.chats]) this.told(item);
        } else {
          const item = await this.get(`/api/chats/${chat}`);
          if (item === null) this.offsets.forget(`chat:${chat}`); // no longer a member
          else this.told(item);
        }
        return;
      } catch {
        await sleep(Math.min(500 * (attempt + 1), 3000));
      }
    }
  }

  told(item) {
    this.offsets.start(item.stream, item.offset);
    this.record("told", { s: item.stream, o: item.offset });
  }

  async start() {
    if (!this.loaded) {
      await this.load();
      this.loaded = true;
    }
    for (;;) {
      try {
        await this.connection.start();
        this.opened();
        return;
      } catch {
        await sleep(500 + Math.random() * 1000);
      }
    }
  }

  async opened() {
    this.connected = true;
    this.record("connected");
    let outcomes;
    try {
      outcomes = await this.connection.invoke("Recover", Object.fromEntries(this.offsets.held));
    } catch {
      return; // the connection ended meanwhile: the next one recovers
    }
    // Logged once the completion's continuation runs: after the events of its frame,
    // so a live event right behind it may count as before it (lenient, never wrong).
    this.record("recovered");
    for (const [stream, outcome] of Object.entries(outcomes)) {
      if (outcome === "forbidden") this.offsets.forget(stream);
      else if (outcome !== "recovered") this.load(stream.startsWith("chat:") ? stream.slice(5) : undefined);
    }
  }

  event(target, payload) {
    const { stream, offset } = payload ?? {};
    if (typeof stream !== "string" || !Number.isInteger(offset)) return;
    const fields = { s: stream, o: offset };
    if (target === "message_received" && payload.sentAt) {
      // MessagePack brings the time as a Date (a timestamp extension), JSON as a string;
      // Date.parse of a Date would go through its string, to the second.
      const sent = payload.sentAt instanceof Date ? payload.sentAt.getTime() : Date.parse(payload.sentAt);
      fields.lag = Date.now() - sent;
    }
    this.record("got", fields);
    this.offsets.note(stream, offset);
    if (target === "chat_updated" && stream === `user:${this.user}`) {
      const joined = payload.change === "ChatCreated" || (payload.change === "ParticipantAdded" && payload.userId === this.user);
      if (joined) this.load(payload.chatId);
      else if (payload.change === "ParticipantRemoved" && payload.userId === this.user) this.offsets.forget(`chat:${payload.chatId}`);
    }
  }
}

// A rejection nobody awaited (the client's transports throw from callbacks when a hub
// dies mid-connect) must not end the process and its clients: say it once per kind.
const seen = new Set();
const complain = (reason) => {
  const text = String(reason?.stack ?? reason);
  if (!seen.has(text)) process.stderr.write(`${text}\n`);
  seen.add(text);
};
process.on("unhandledRejection", complain);
process.on("uncaughtException", complain);

const clients = config.clients.map((spec) => new Client(spec));
for (const client of clients) client.start();

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  const command = JSON.parse(line);
  if (command.cmd === "census") {
    const connected = clients.filter((c) => c.connected).length;
    process.stdout.write(JSON.stringify({ connected, clients: clients.length }) + "\n");
  } else if (command.cmd === "flush") {
    await new Promise((resolve) => log.write("", resolve));
    process.stdout.write(JSON.stringify({ flushed: true }) + "\n");
  } else if (command.cmd === "stop") {
    break;
  }
}
for (const client of clients) client.stopping = true;
await Promise.all(clients.map((c) => c.connection.stop().catch(() => {})));
await new Promise((resolve) => log.end(resolve));
process.exit(0);
