"""The seam between worker and hub: Publisher protocols, Channels group names, the pipelined
group_send, the batched-receive channel layer and control messages to open connections."""
