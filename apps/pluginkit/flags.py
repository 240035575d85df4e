"""Flag values both plugins parse the same way (each flag falls back to an env variable)."""

from __future__ import annotations

from collections.abc import Mapping


def env_flag(env: Mapping[str, str], key: str, default: str) -> str:
    """The flag's default: the environment variable the chart sets, else `default`."""
    return env.get(key, default)


def port(text: str) -> int | None:
    """A TCP port; "" or "0" means the listener is off."""
    return int(text) if text and text != "0" else None


def boolean(text: str) -> bool:
    return text.strip().lower() == "true"


def positive_int(text: str) -> int | None:
    """A whole number above 0, else None (the caller names the flag in its error)."""
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value > 0 else None


def positive_seconds(text: str) -> float | None:
    """A finite number of seconds above 0, else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 < value < float("inf") else None
