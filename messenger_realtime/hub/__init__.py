"""The /hubs/messenger SignalR-compatible hub: negotiate, WebSocket consumer, protocol."""
