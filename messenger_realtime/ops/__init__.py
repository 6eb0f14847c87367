"""Operating the app: metrics, traces, the log format and field names, health endpoints.
Depends on nothing else of the app."""
