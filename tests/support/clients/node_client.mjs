// A controllable @microsoft/signalr client for the Python tests.
// Usage: node node_client.mjs URL TOKEN [OPTIONS_JSON]
// OPTIONS_JSON (all optional): {"stateful": true} (withStatefulReconnect),
// "bufferSize" (its client-side buffer), "transport": "WebSockets" | "ServerSentEvents" |
// "LongPolling" (only that one), "messagepack": true (the MessagePack hub protocol).
// Prints one JSON object per line (connection states, events, invocation results; a
// Date in a payload prints as {"$date": ISO}); reads commands from stdin: "groups"
// (invoke GetGroups), "recover JSON" (invoke Recover with that object), "token JWT" (the token the next (re)connect uses),
// "renew JWT" (invoke RenewToken with it; the token the client sends stays the one it has), "transport"
// (print the transport in use), "watch JSON" (invoke WatchPresence with that list of user
// ids, and again after every reconnect, as a real client must: the watch is the
// connection's), "typing CHAT_ID" (send Typing), "drop" (destroy the WebSocket's TCP socket),
// "extensions" (print the WebSocket extensions negotiated, as Node's ws names them), "stop".
import * as signalR from "@microsoft/signalr";
import * as readline from "node:readline";

const [url, firstToken, optionsJson] = process.argv.slice(2);
const options = JSON.parse(optionsJson || "{}");
let token = firstToken;
const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

// Dates (MessagePack timestamps) made visible: JSON.stringify would turn them into text.
const marked = (value) => {
  if (value instanceof Date) return { $date: value.toISOString() };
  if (Array.isArray(value)) return value.map(marked);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, marked(v)]));
  }
  return value;
};

const httpOptions = { accessTokenFactory: () => token };
if (options.transport) httpOptions.transport = signalR.HttpTransportType[options.transport];
let builder = new signalR.HubConnectionBuilder()
  .withUrl(url, httpOptions)
  .withAutomaticReconnect([0, 250, 500, 1000, 1000, 1000, 2000, 2000, 2000])
  .configureLogging(signalR.LogLevel.Warning);
if (options.stateful) {
  builder = builder.withStatefulReconnect(options.bufferSize ? { bufferSize: options.bufferSize } : {});
}
if (options.messagepack) {
  const { MessagePackHubProtocol } = await import("@microsoft/signalr-protocol-msgpack");
  builder = builder.withHubProtocol(new MessagePackHubProtocol());
}
const connection = builder.build();

// Every event of the hub (docs/contracts.md).
const EVENTS = [
  "message_received", "message_edited", "message_deleted", "read_receipt_updated",
  "chat_updated", "contact_request_received", "contact_request_accepted", "contact_removed",
  "call_invited", "call_answered", "call_declined", "call_missed", "call_cancelled",
  "call_ended", "conference_invited", "conference_started", "conference_ended",
  "conference_participant_joined", "conference_participant_left", "recording_started",
  "recording_stopped", "recording_available", "recording_failed", "screen_share_started",
  "screen_share_stopped", "blacklist_changed", "presence", "typing",
];
for (const name of EVENTS) {
  connection.on(name, (payload) => {
    print({ event: name, payload: marked(payload) }); // no return value: events take none
  });
}
connection.onreconnecting((error) => print({ state: "reconnecting", error: String(error) }));
let watched = null; // the last list given to "watch": watched again after a reconnect
const watch = async () => {
  try {
    print({ watching: await connection.invoke("WatchPresence", watched) });
  } catch (error) {
    print({ invokeError: String(error) });
  }
};
connection.onreconnected(async (id) => {
  print({ state: "reconnected", connectionId: id });
  if (watched) await watch();
});
connection.onclose((error) => print({ state: "closed", error: error ? String(error) : null }));

const transportName = () => connection.connection.transport?.constructor?.name ?? null;

try {
  await connection.start();
  print({ state: "connected", connectionId: connection.connectionId, transport: transportName() });
} catch (error) {
  print({ state: "failed", error: String(error) });
  process.exit(1);
}

const commands = readline.createInterface({ input: process.stdin });
for await (const line of commands) {
  if (line === "groups") {
    try {
      print({ groups: await connection.invoke("GetGroups") });
    } catch (error) {
      print({ invokeError: String(error) });
    }
  } else if (line.startsWith("recover ")) {
    try {
      print({ recovered: await connection.invoke("Recover", JSON.parse(line.slice(8))) });
    } catch (error) {
      print({ invokeError: String(error) });
    }
  } else if (line.startsWith("watch ")) {
    watched = JSON.parse(line.slice("watch ".length));
    await watch();
  } else if (line.startsWith("typing ")) {
    await connection.send("Typing", line.slice("typing ".length));
    print({ typed: true });
  } else if (line.startsWith("renew ")) {
    try {
      print({ renewed: await connection.invoke("RenewToken", line.slice("renew ".length)) });
    } catch (error) {
      print({ invokeError: String(error) });
    }
  } else if (line.startsWith("token ")) {
    token = line.slice("token ".length);
    print({ token: "set" });
  } else if (line === "transport") {
    print({ transport: transportName() });
  } else if (line === "extensions") {
    print({ extensions: connection.connection.transport._webSocket.extensions });
  } else if (line === "drop") {
    connection.connection.transport._webSocket._socket.destroy();
    print({ dropped: true });
  } else if (line === "stop") {
    await connection.stop();
    process.exit(0);
  }
}
