// The demo page: a thin view over RealtimeClient (ordering, dedupe, recovery and resync
// live there).
import { RealtimeClient } from "../messenger_realtime/realtime-client.js";
import { restCallbacks } from "./rest.js";

const $ = (id) => document.getElementById(id);
const me = $("me").dataset.userId;
let token = null;
let tokenUntil = 0;
let current = null; // the open chat's id
let chats = [];
let incomingCall = null;

async function getToken() {
  if (!token || Date.now() > tokenUntil) {
    const reply = await (await fetch("/demo/token")).json();
    token = reply.token;
    tokenUntil = Date.now() + (reply.expiresIn - 60) * 1000;
  }
  return token;
}

const rest = restCallbacks({ getToken });
const client = new RealtimeClient({ signalR: window.signalR, getToken, rest });

client.addEventListener("state", (e) => {
  $("connection").textContent = e.detail.state;
  $("connection").className = `state ${e.detail.state}`;
});
client.addEventListener("messages", (e) => {
  if (e.detail.chatId === current) renderMessages();
});
client.addEventListener("read_receipt_updated", (e) => {
  if (e.detail.chatId !== current || e.detail.userId === me) return;
  const who = nameOf(e.detail.userId);
  $("read-receipts").textContent = `${who} has read up to #${e.detail.lastReadSeq}`;
});
client.addEventListener("chat_updated", () => loadChats());
client.addEventListener("forbidden", () => loadChats()); // removed while away
client.addEventListener("call_invited", (e) => {
  incomingCall = e.detail;
  $("call-text").textContent = `Incoming call from ${nameOf(e.detail.callerUserId)}`;
  $("call-banner").hidden = false;
});
for (const ended of ["call_cancelled", "call_missed", "call_ended", "call_answered", "call_declined"]) {
  client.addEventListener(ended, (e) => {
    if (incomingCall && e.detail.callId === incomingCall.callId) $("call-banner").hidden = true;
  });
}

function nameOf(userId) {
  for (const chat of chats) {
    const p = chat.participants.find((x) => x.userId === userId);
    if (p) return p.displayName;
  }
  return "someone";
}

async function loadChats() {
  chats = await client.chats(); // notes where each stream stands, for recovery
  $("chats").replaceChildren(
    ...chats.map((chat) => {
      const li = document.createElement("li");
      const others = chat.participants.filter((p) => p.userId !== me).map((p) => p.displayName);
      li.textContent = chat.title || others.join(", ");
      li.dataset.chatId = chat.chatId;
      li.className = chat.chatId === current ? "active" : "";
      li.onclick = () => openChat(chat.chatId, li.textContent);
      return li;
    }),
  );
  if (current && !chats.some((c) => c.chatId === current)) {
    current = null; // removed from it: stop showing it
    $("messages").replaceChildren();
    $("composer").hidden = true;
    $("chat-title").textContent = "Pick a chat";
  }
}

async function openChat(chatId, title) {
  current = chatId;
  $("chat-title").textContent = title;
  $("composer").hidden = false;
  $("read-receipts").textContent = "";
  for (const li of $("chats").children) li.className = li.dataset.chatId === chatId ? "active" : "";
  await client.openChat(chatId);
  renderMessages();
}

let lastRead = {};
function renderMessages() {
  const messages = client.timeline(current)?.messages() || [];
  $("messages").replaceChildren(...messages.map(renderMessage));
  const last = messages.length ? messages[messages.length - 1].seq : 0;
  if (last > (lastRead[current] || 0)) {
    lastRead[current] = last;
    rest.call("POST", `/api/chats/${current}/read`, { seq: last }).catch(() => {});
  }
}

function renderMessage(m) {
  const li = document.createElement("li");
  li.dataset.seq = m.seq;
  li.dataset.messageId = m.messageId;
  const seq = Object.assign(document.createElement("span"), { className: "seq", textContent: `#${m.seq}` });
  const author = m.senderUserId ? `${nameOf(m.senderUserId)}: ` : "";
  const text = document.createElement("span");
  text.className = m.deletedAt ? "text deleted" : "text";
  text.textContent = m.deletedAt ? "(deleted)" : author + (m.body ?? m.cardText ?? m.fileMeta?.name ?? "");
  li.append(seq, text);
  if (m.senderUserId === me && !m.deletedAt) {
    const edit = Object.assign(document.createElement("button"), { textContent: "Edit", className: "edit" });
    edit.onclick = async () => {
      const body = prompt("Edit message", m.body);
      if (body) await client.edit(current, m.messageId, body).catch((err) => alert(err.message));
    };
    const del = Object.assign(document.createElement("button"), { textContent: "Delete", className: "delete" });
    del.onclick = () => client.remove(current, m.messageId).catch((err) => alert(err.message));
    li.append(" ", edit, " ", del);
  }
  return li;
}

$("composer").onsubmit = async (event) => {
  event.preventDefault();
  const body = $("body").value.trim();
  if (!body || !current) return;
  $("body").value = "";
  await client.send(current, body).catch((err) => alert(err.message));
};
$("call-answer").onclick = () => callAction("answer");
$("call-decline").onclick = () => callAction("decline");

async function callAction(action) {
  if (incomingCall) await rest.call("POST", `/api/calls/${incomingCall.callId}/${action}`).catch(() => {});
  $("call-banner").hidden = true;
}

window.realtime = client; // for the browser tests and curious people
await client.start();
await loadChats();
