"""Development keys: random, made once per checkout, kept in the git-ignored .local/.

Production sets DJANGO_SECRET_KEY and JWT_SIGNING_KEY; without them every machine gets
keys of its own (never a key written in the repository), so a forgotten variable shows up
as tokens that other machines reject, not as a shared, guessable secret.
"""

import json
import secrets
from pathlib import Path


def dev_keys(local_dir: Path) -> dict[str, str]:
    path = local_dir / "dev-keys.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        pass
    keys = {"secret_key": secrets.token_urlsafe(50), "jwt_signing_key": secrets.token_urlsafe(48)}
    local_dir.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(json.dumps(keys))
    return keys
