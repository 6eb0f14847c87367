"""The physical transports a logical hub connection (hub/connection/) is carried by:
WebSockets (websocket.py), Server-Sent Events (sse.py) and long polling (longpolling.py),
the last two behind the hub's HTTP endpoint (http.py)."""
