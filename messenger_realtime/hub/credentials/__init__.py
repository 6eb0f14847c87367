"""Credentials at the hub: what a caller presents to prove who it is, and the rules every
entry point (negotiate, each transport, the host's REST API) applies to them.

- request.py: who is calling, from an ASGI scope: the same rules for negotiate and every
  transport (a bearer token wins; else a same-origin Django session), and CORS.
- tokens.py: JWT access tokens, negotiate's connection tokens, and identify() (a token
  or a Django session's user -> an active user and when the credentials expire).
- sessions.py: Django sessions (the project's own pages): the session a cookie names,
  when it ends, whether it still holds, and the same-origin rule that guards its cookie.

What one open connection holds of them (their expiry, its session) is a part of the
connection: hub/connection/authentication.py. The media credentials the hub mints for
each recipient of a call are not the caller's: hub/media_credentials.py.
"""
