"""The minimal host's settings: a package (base.py, then realtime.py), read from the
environment with os.environ alone. Nothing here comes from this repository's project/."""

from chatsite.settings.base import *  # noqa: F403
from chatsite.settings.realtime import *  # noqa: F403
