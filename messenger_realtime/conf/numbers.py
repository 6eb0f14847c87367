"""A number from the environment, exactly as spelt or refused (no Django here, so the
host's settings module can use it too).

django-environ's int() and float() go through parse_value, which dropped the characters
it did not expect (`1e12` became 112.0, `1e3` 13.0) or failed without naming the variable.
"""

import math
import os
import re


def parse_number(text: str, kind: type) -> int | float:
    """`text` as exactly the number it spells, or ValueError saying why: `1e3` is 1000.0
    for a float and refused for an integer; `inf`, `nan` and `12abc` are refused."""
    text = text.strip()
    if kind is int:
        if not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError("not a whole number")
        return int(text)
    try:
        number = float(text)
    except ValueError as exc:
        raise ValueError("not a number") from exc
    if not math.isfinite(number):
        raise ValueError("not a finite number")
    return number


def env_number(name: str, kind: type, default: float, lowest: float, highest: float) -> float:
    """$name as a number of `kind` within [lowest, highest], `default` when unset or empty;
    otherwise ValueError naming the variable, its value and the rule (for settings.py)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse_number(raw, kind)
    except ValueError as exc:
        raise ValueError(f"${name}: invalid value {raw!r}: {exc}") from None
    if not lowest <= value <= highest:
        raise ValueError(f"${name}: {raw} is outside [{lowest:g}, {highest:g}]")
    return value
