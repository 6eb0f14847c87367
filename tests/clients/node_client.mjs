// A controllable @microsoft/signalr client for the Python tests.
// Usage: node node_client.mjs URL TOKEN
// Prints one JSON object per line (connection states, events, invocation results);
// reads commands from stdin: "groups" (invoke GetGroups), "stop".
import * as signalR from "@microsoft/signalr";
import * as readline from "node:readline";

const [url, token] = process.argv.slice(2);
const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

const connection = new signalR.HubConnectionBuilder()
  .withUrl(url, { accessTokenFactory: () => token })
  .withAutomaticReconnect([0, 250, 500, 1000, 1000, 1000, 2000, 2000, 2000])
  .configureLogging(signalR.LogLevel.Warning)
  .build();

for (const name of ["message_received", "chat_updated"]) {
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
  } else if (line === "stop") {
    await connection.stop();
    process.exit(0);
  }
}
