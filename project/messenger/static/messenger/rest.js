// This project's REST API as the web client's `rest` callbacks (docs/api.md): the host's
// paths live here, in the host, never in the app's module (realtime-client.js).
/** The callbacks RealtimeClient asks for, over this project's /api/ paths. */
export function restCallbacks({ getToken, apiBase = "", fetchImpl = globalThis.fetch.bind(globalThis) }) {
  async function call(method, path, body) {
    const headers = { Authorization: `Bearer ${await getToken()}`, "Content-Type": "application/json" };
    let response;
    try {
      response = await fetchImpl(apiBase + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      // No answer: the request may or may not have happened (the client retries a send).
      throw Object.assign(new Error(`no answer from the server (${error?.message ?? error})`), {
        noAnswer: true,
        cause: error,
      });
    }
    if (response.status === 204) return null;
    const data = await response.json();
    if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
    return data;
  }
  return {
    call, // the page's own requests (read receipts, call actions)
    listChats: () => call("GET", "/api/chats"),
    openChat: (chatId) => call("GET", `/api/chats/${chatId}`),
    messagesAfter: async (chatId, seq, limit) =>
      (await call("GET", `/api/chats/${chatId}/messages?afterSeq=${seq}&limit=${limit}`)).messages,
    send: (chatId, message) => call("POST", `/api/chats/${chatId}/messages`, message),
    edit: (chatId, messageId, body) => call("PATCH", `/api/chats/${chatId}/messages/${messageId}`, { body }),
    remove: (chatId, messageId) => call("DELETE", `/api/chats/${chatId}/messages/${messageId}`),
  };
}
