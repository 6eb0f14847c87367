"""Persist-then-push realtime dispatch: outbox, worker and hub for a Django messenger."""
