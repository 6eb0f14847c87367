// The demo page: a thin view over RealtimeClient (ordering, dedupe, recovery and resync
// live there) and ChatBook (unread counts and read positions, chat-state.js).
import { RealtimeClient } from "../messenger_realtime/realtime-client.js";
import { restCallbacks } from "./rest.js";
import { ChatBook, initials, messageTime } from "./chat-state.js";

const $ = (id) => document.getElementById(id);
const me = $("me").dataset.userId;
const book = new ChatBook(me);
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

const STATE_TEXT = { connecting: "connecting…", reconnecting: "reconnecting…" };
client.addEventListener("state", (e) => {
  $("connection").textContent = STATE_TEXT[e.detail.state] ?? e.detail.state;
  $("connection").className = `state ${e.detail.state}`;
});
client.addEventListener("messages", (e) => {
  if (e.detail.chatId === current) {
    renderMessages();
  } else {
    // Opened earlier, so its timeline stays live: count what came since.
    for (const m of client.timeline(e.detail.chatId)?.messages() ?? []) book.noteMessage(m.chatId, m.seq, m.senderUserId);
    renderBadges();
  }
});
client.addEventListener("unread", (e) => {
  // An event of a chat never opened on this page.
  book.noteMessage(e.detail.chatId, e.detail.seq, e.detail.senderUserId);
  renderBadges();
});
client.addEventListener("read_receipt_updated", (e) => {
  book.noteRead(e.detail.chatId, e.detail.userId, e.detail.lastReadSeq);
  if (e.detail.userId === me) renderBadges(); // read on another device
  else if (e.detail.chatId === current) renderMessages();
});
client.addEventListener("presence", () => renderPresence());
// Who is typing, per chat: userId -> until (unix seconds), shown until then.
const typists = new Map();
let typingTimer = null;
client.addEventListener("typing", (e) => {
  const { chatId, userId, until } = e.detail;
  if (!typists.has(chatId)) typists.set(chatId, new Map());
  typists.get(chatId).set(userId, until);
  renderTyping();
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

function el(tag, props = {}, ...children) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function nameOf(userId) {
  for (const chat of chats) {
    const p = chat.participants.find((x) => x.userId === userId);
    if (p) return p.displayName;
  }
  return "someone";
}

function titleOf(chat) {
  return chat.title || chat.participants.filter((p) => p.userId !== me).map((p) => p.displayName).join(", ");
}

async function loadChats() {
  chats = await client.chats(); // notes where each stream stands, for recovery
  book.load(chats);
  $("chats").replaceChildren(
    ...chats.map((chat) => {
      const title = titleOf(chat);
      const button = el(
        "button",
        { type: "button", onclick: () => openChat(chat.chatId) },
        el("span", { className: "avatar", ariaHidden: "true", textContent: initials(title) }),
        el("span", { className: "title", textContent: title }),
      );
      return el("li", { className: chat.chatId === current ? "active" : "" }, button);
    }),
  );
  for (const [n, li] of [...$("chats").children].entries()) li.dataset.chatId = chats[n].chatId;
  renderBadges();
  // Who of our chats' members is online: their state now, then each change.
  const others = [...new Set(chats.flatMap((c) => c.participants.map((p) => p.userId)))];
  client
    .watchPresence(others.filter((u) => u !== me).slice(0, 200))
    .then(renderPresence, () => {}); // refused or unavailable: no dots
  if (current && !chats.some((c) => c.chatId === current)) {
    current = null; // removed from it: stop showing it
    $("messages").replaceChildren();
    $("composer").hidden = true;
    $("chat-title").textContent = "Pick a chat";
    $("chat-avatar").textContent = "";
    $("chat-members").textContent = "";
    $("placeholder").textContent = "Pick a chat on the left to start.";
    $("placeholder").hidden = false;
  }
}

function renderBadges() {
  for (const li of $("chats").children) {
    const count = li.dataset.chatId === current ? 0 : book.unread(li.dataset.chatId);
    const button = li.querySelector("button");
    button.querySelector(".unread")?.remove();
    li.classList.toggle("has-unread", count > 0);
    if (count > 0) {
      const label = `${count} unread`;
      button.append(el("span", { className: "unread", textContent: count > 99 ? "99+" : String(count), title: label, ariaLabel: label }));
    }
  }
}

/** "Bob is typing…" under the open chat, until the last typist's `until`. */
function renderTyping() {
  clearTimeout(typingTimer);
  const now = Date.now() / 1000;
  const here = typists.get(current) ?? new Map();
  for (const [userId, until] of here) if (until <= now) here.delete(userId);
  const names = [...here.keys()].map(nameOf);
  $("typing").hidden = names.length === 0;
  $("typing").textContent =
    names.length === 1 ? `${names[0]} is typing…` : `${names.join(", ")} are typing…`;
  if (here.size) typingTimer = setTimeout(renderTyping, (Math.min(...here.values()) - now) * 1000 + 50);
}

/** A member as the header lists them: "you", "Bob (online)", "Carol (last seen 14:05)". */
function memberText(p) {
  if (p.userId === me) return "you";
  const state = client.presence.get(p.userId);
  if (state?.online) return `${p.displayName} (online)`;
  if (state?.lastSeen) return `${p.displayName} (last seen ${messageTime(new Date(state.lastSeen * 1000).toISOString())})`;
  return p.displayName;
}

/** A green dot on the chats with someone online; the open chat's members' states. */
function renderPresence() {
  for (const li of $("chats").children) {
    const chat = chats.find((c) => c.chatId === li.dataset.chatId);
    const online = chat?.participants.some((p) => p.userId !== me && client.presence.get(p.userId)?.online);
    li.classList.toggle("online", Boolean(online));
  }
  const chat = chats.find((c) => c.chatId === current);
  $("chat-members").textContent = chat ? chat.participants.map(memberText).join(", ") : "";
}

async function openChat(chatId) {
  const chat = chats.find((c) => c.chatId === chatId);
  current = chatId;
  $("chat-title").textContent = chat ? titleOf(chat) : "";
  $("chat-avatar").textContent = chat ? initials(titleOf(chat)) : "";
  renderPresence();
  renderTyping();
  $("messages").replaceChildren();
  $("composer").hidden = false;
  for (const li of $("chats").children) li.classList.toggle("active", li.dataset.chatId === chatId);
  renderBadges();
  $("body").focus();
  await client.openChat(chatId);
  if (current === chatId) renderMessages({ scroll: true });
}

function renderMessages({ scroll = false } = {}) {
  const scroller = $("scroller");
  const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
  const messages = client.timeline(current)?.messages() || [];
  $("messages").replaceChildren(...messages.map((m, n) => renderMessage(m, messages[n - 1])));
  $("placeholder").hidden = messages.length > 0;
  $("placeholder").textContent = "No messages yet. Say hello!";
  const last = messages.length ? messages[messages.length - 1] : null;
  if (scroll || atBottom || last?.senderUserId === me) scroller.scrollTop = scroller.scrollHeight;
  if (last && book.markRead(current, last.seq)) {
    rest.call("POST", `/api/chats/${current}/read`, { seq: last.seq }).catch(() => {});
  }
  renderBadges();
}

function renderMessage(m, previous) {
  const own = m.senderUserId === me;
  const li = el("li", { className: own ? "message own" : "message" });
  li.dataset.seq = m.seq;
  li.dataset.messageId = m.messageId;
  if (!own && m.senderUserId && previous?.senderUserId !== m.senderUserId) {
    li.append(el("span", { className: "sender", textContent: nameOf(m.senderUserId) }));
  }
  const text = el("span", {
    className: m.deletedAt ? "text deleted" : "text",
    textContent: m.deletedAt ? "Message deleted" : (m.body ?? m.cardText ?? m.fileMeta?.name ?? ""),
  });
  const meta = el("span", { className: "meta" });
  if (m.editedAt && !m.deletedAt) meta.append(el("span", { className: "edited", textContent: "edited" }));
  if (m.sentAt) {
    const time = el("time", { dateTime: m.sentAt, textContent: messageTime(m.sentAt) });
    time.title = new Date(m.sentAt).toLocaleString();
    meta.append(time);
  }
  if (own && !m.deletedAt) {
    const readers = book.readersOf(current, m.seq).map(nameOf);
    const label = readers.length ? `Read by ${readers.join(", ")}` : "Sent";
    meta.append(el("span", { className: readers.length ? "ticks read" : "ticks", role: "img", ariaLabel: label, title: label, textContent: readers.length ? "✓✓" : "✓" }));
  }
  li.append(el("div", { className: "bubble" }, text, meta));
  if (own && !m.deletedAt) {
    const edit = el("button", { type: "button", className: "edit", textContent: "Edit" });
    edit.onclick = async () => {
      const body = prompt("Edit message", m.body);
      if (body) await client.edit(current, m.messageId, body).catch((err) => alert(err.message));
    };
    const del = el("button", { type: "button", className: "delete", textContent: "Delete" });
    del.onclick = () => client.remove(current, m.messageId).catch((err) => alert(err.message));
    li.append(el("div", { className: "actions" }, edit, del));
  }
  return li;
}

function growComposer() {
  const body = $("body");
  body.style.height = "auto";
  body.style.height = `${body.scrollHeight + 2}px`;
}

$("body").addEventListener("input", () => {
  growComposer();
  if (current && $("body").value) client.typing(current); // throttled by the client
});
$("body").addEventListener("keydown", (event) => {
  // Enter sends; Shift+Enter is a new line; Enter that ends an IME composition is not a send.
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("composer").onsubmit = async (event) => {
  event.preventDefault();
  const body = $("body").value.trim();
  $("body").focus();
  if (!body || !current) return;
  $("body").value = "";
  growComposer();
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
