// Unit tests of the demo page's bookkeeping: unread counts, read receipts, message times.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ChatBook, initials, messageTime } from "../../project/messenger/static/messenger/chat-state.js";

const ME = "me";
const listed = (lastSeq, myRead, otherRead = 0) => ({
  chatId: "c1",
  lastSeq,
  participants: [
    { userId: ME, lastReadSeq: myRead },
    { userId: "bob", lastReadSeq: otherRead },
  ],
});

test("unread is the chat's last Seq minus the user's read position from the list", () => {
  const book = new ChatBook(ME);
  book.load([listed(5, 2)]);
  assert.equal(book.unread("c1"), 3);
  assert.equal(book.unread("unknown"), 0);
});

test("a message from someone else adds to unread, one from the user does not", () => {
  const book = new ChatBook(ME);
  book.load([listed(2, 2)]);
  book.noteMessage("c1", 3, "bob");
  assert.equal(book.unread("c1"), 1);
  book.noteMessage("c1", 4, ME); // sent from another device: the user has read up to it
  assert.equal(book.unread("c1"), 0);
});

test("an edit or a duplicate of an older message changes nothing", () => {
  const book = new ChatBook(ME);
  book.load([listed(4, 4)]);
  book.noteMessage("c1", 2, "bob");
  book.noteMessage("c1", 4, "bob");
  assert.equal(book.unread("c1"), 0);
});

test("opening the chat clears unread and asks to tell the server once", () => {
  const book = new ChatBook(ME);
  book.load([listed(3, 0)]);
  assert.equal(book.markRead("c1", 3), true);
  assert.equal(book.unread("c1"), 0);
  assert.equal(book.markRead("c1", 3), false);
});

test("a late chat list never moves a position back", () => {
  const book = new ChatBook(ME);
  book.noteMessage("c1", 6, "bob");
  book.markRead("c1", 6);
  book.load([listed(4, 1)]);
  assert.equal(book.unread("c1"), 0);
});

test("a read receipt from the user's other device clears unread there too", () => {
  const book = new ChatBook(ME);
  book.load([listed(3, 0)]);
  book.noteRead("c1", ME, 3);
  assert.equal(book.unread("c1"), 0);
});

test("readers of a message are the others whose position reached its Seq", () => {
  const book = new ChatBook(ME);
  book.load([listed(3, 3, 2)]);
  assert.deepEqual(book.readersOf("c1", 2), ["bob"]);
  assert.deepEqual(book.readersOf("c1", 3), []);
  book.noteRead("c1", "bob", 3);
  assert.deepEqual(book.readersOf("c1", 3), ["bob"]);
});

test("a message time is the clock time today, a weekday this week, a date before", () => {
  const now = new Date("2026-12-04T15:00:00Z");
  const opts = { now, locale: "en-GB", timeZone: "UTC" };
  assert.equal(messageTime("2026-12-04T14:05:09Z", opts), "14:05");
  assert.equal(messageTime("2026-12-02T09:30:00Z", opts), "Wed 9:30");
  assert.equal(messageTime("2026-11-03T09:30:00Z", opts), "3 Nov 9:30");
  assert.equal(messageTime(null, opts), messageTime("not a time", opts));
});

test("initials take the first letters of up to two words", () => {
  assert.equal(initials("Alice"), "A");
  assert.equal(initials("Demo team"), "DT");
  assert.equal(initials(""), "?");
});
