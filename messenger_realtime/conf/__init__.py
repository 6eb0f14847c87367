"""Settings: options per process role (settings.py), their rules (validation.py) and the
system checks that report them (checks.py). Imports nothing else of the app."""
