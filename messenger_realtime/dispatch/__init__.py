"""The worker (`manage.py dispatch_realtime`): leadership, passes of overlapping batches,
the hot-path SQL, outcomes and their report, and the single-process mode inside Daphne."""
