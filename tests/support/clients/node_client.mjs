// A controllable @microsoft/signalr client for the Python tests.
// Usage: node node_client.mjs URL TOKEN
// Prints one JSON object per line (connection states, events, invocation results);
// reads commands from stdin: "groups" (invoke GetGroups), "token JWT" (the token the next
// (re)connect uses), "stop".
import * as signalR from "@microsoft/signalr";
import * as readline from "node:readline";

const [url, firstToken] = process.argv.slice(2);
let token = firstToken;
const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

const connection = new signalR.HubConnectionBuilder()
  .withUrl(url, { accessTokenFactory: () => token })
  .withAutomaticReconnect([0, 250, 500, 1000, 1000, 1000, 2000, 2000, 2000])
  .configureLogging(signalR.LogLevel.Warning)
  .build();

// Every event of the hub (docs/contracts.md).
const EVENTS = [
  "message_received", "message_edited", "message_deleted", "read_receipt_updated",
  "chat_updated", "contact_request_received", "contact_request_accepted", "contact_removed",
  "call_invited", "call_answered", "call_declined", "call_missed", "call_cancelled",
  "call_ended", "conference_invited", "conference_started", "conference_ended",
  "conference_participant_joined", "conference_participant_left", "recording_started",
  "recording_stopped", "recording_available", "recording_failed", "screen_share_started",
  "screen_share_stopped", "blacklist_changed",
];
for (const name of EVENTS) {
  connection.on(name, (payload) => print({ event: name, payload }));
}
connection.onreconnecting((error) => print({ state: "reconnecting", error: String(error) }));
connection.onreconnected((id) => print({ state: "reconnected", connectionId: id }));
connection.onclose((error) => print({ state: "closed", error: error ? String(error) : null }));

try {
  await connection.start();
  print({ state: "connected", connectionId: connection.connectionId });
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
  } else if (line.startsWith("token ")) {
    token = line.slice("token ".length);
    print({ token: "set" });
  } else if (line === "stop") {
    await connection.stop();
    process.exit(0);
  }
}
