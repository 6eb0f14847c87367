"""Development keys: random, made once per checkout, kept in the git-ignored .local/.

Production sets DJANGO_SECRET_KEY, JWT_SIGNING_KEY, MEDIA_JWT_SIGNING_KEY and
TURN_SHARED_SECRET; without them every checkout gets keys of its own (never a key written
in the repository), so a forgotten variable shows up as tokens that other machines
reject, not as a shared, guessable secret.
"""

import json
import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

NAMES = ("secret_key", "jwt_signing_key", "media_jwt_signing_key", "turn_shared_secret")


def dev_keys(local_dir: Path) -> dict[str, str]:
    path = local_dir / "dev-keys.json"
    try:
        keys = dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        keys = {}
    missing = [name for name in NAMES if not keys.get(name)]
    if missing:
        keys.update({name: secrets.token_urlsafe(48) for name in missing})
        try:
            local_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.touch(mode=0o600)
            tmp.write_text(json.dumps(keys))
            os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
        except OSError as exc:
            raise ImproperlyConfigured(
                f"cannot keep development keys in {local_dir} ({exc.strerror}); set "
                "DJANGO_SECRET_KEY, JWT_SIGNING_KEY, MEDIA_JWT_SIGNING_KEY and TURN_SHARED_SECRET"
            ) from exc
    return keys
