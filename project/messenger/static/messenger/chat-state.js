// The demo page's bookkeeping, apart from the DOM so Node tests it (tests/js/): where each
// chat stands (its last Seq, the signed-in user's read position, everyone else's) and how a
// message's time reads. Unread is what the data model gives: a chat's last Seq minus the
// user's own lastReadSeq (GET /api/chats), moved on by live events and read receipts.

/** Per chat: the last Seq seen, the user's read position and the others' (by user id). */
export class ChatBook {
  constructor(me) {
    this.me = me;
    this.chats = new Map(); // chatId -> { lastSeq, reads: Map(userId -> lastReadSeq) }
  }

  entry(chatId) {
    if (!this.chats.has(chatId)) this.chats.set(chatId, { lastSeq: 0, reads: new Map() });
    return this.chats.get(chatId);
  }

  /** From the REST chat list: positions only move forward (a late list undoes nothing). */
  load(chats) {
    for (const chat of chats) {
      const entry = this.entry(chat.chatId);
      entry.lastSeq = Math.max(entry.lastSeq, chat.lastSeq ?? 0);
      for (const p of chat.participants ?? []) this.noteRead(chat.chatId, p.userId, p.lastReadSeq ?? 0);
    }
  }

  /** A message seen live; one the user sent (here or on another device) counts as read. */
  noteMessage(chatId, seq, senderUserId) {
    if (!Number.isInteger(seq)) return;
    const entry = this.entry(chatId);
    entry.lastSeq = Math.max(entry.lastSeq, seq);
    if (senderUserId === this.me) this.noteRead(chatId, this.me, seq);
  }

  /** A read position (a receipt, the list); true if it moved. */
  noteRead(chatId, userId, seq) {
    const reads = this.entry(chatId).reads;
    if ((reads.get(userId) ?? 0) >= seq) return false;
    reads.set(userId, seq);
    return true;
  }

  /** The user read the chat up to `seq`: true if the server should be told (it moved). */
  markRead(chatId, seq) {
    this.noteMessage(chatId, seq);
    return this.noteRead(chatId, this.me, seq);
  }

  unread(chatId) {
    const entry = this.chats.get(chatId);
    if (!entry) return 0;
    return Math.max(0, entry.lastSeq - (entry.reads.get(this.me) ?? 0));
  }

  /** The other users who have read the message at `seq`. */
  readersOf(chatId, seq) {
    const reads = this.chats.get(chatId)?.reads ?? new Map();
    return [...reads].filter(([userId, read]) => userId !== this.me && read >= seq).map(([userId]) => userId);
  }
}

/** "14:05" for today, "Mon 14:05" within the week, "3 Mar 14:05" before (the user's locale). */
export function messageTime(iso, { now = new Date(), locale, timeZone } = {}) {
  const at = new Date(iso ?? NaN);
  if (Number.isNaN(at.getTime())) return "";
  const zone = timeZone ? { timeZone } : {};
  const time = at.toLocaleTimeString(locale, { hour: "numeric", minute: "2-digit", ...zone });
  const day = (d) => d.toLocaleDateString("en-CA", zone); // YYYY-MM-DD in that zone
  if (day(at) === day(now)) return time;
  const days = (now - at) / 86_400_000;
  const date =
    days >= 0 && days < 6
      ? at.toLocaleDateString(locale, { weekday: "short", ...zone })
      : at.toLocaleDateString(locale, { day: "numeric", month: "short", ...zone });
  return `${date} ${time}`;
}

/** "Alice" -> "A", "Demo team" -> "DT": an avatar's letters. */
export function initials(name) {
  const words = String(name || "?").trim().split(/\s+/).filter(Boolean);
  return (words.length > 1 ? words[0][0] + words[1][0] : (words[0] || "?")[0]).toUpperCase();
}
