"""Daphne, made the hub's server: its WebSocket protocol (websocket.py: size limits with
a Close, the send bound, the scheme, Pings taken), its HTTP request (http.py: the send
bound of event streams, the upgraded channel released), and the server's shutdown, log
scrubbing and per-connection checkers (server.py, which installs all of them).

Apart from the SignalR side of the hub: hub/protocols/ are the hub protocols (JSON,
MessagePack), hub/transports/ the SignalR transports (WebSockets, SSE, long polling).
"""
