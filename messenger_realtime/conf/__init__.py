"""Settings: every key declared once with its rules (declared.py), options per process
role read from it (settings.py), the system checks that report them (checks.py).
Imports nothing else of the app."""
