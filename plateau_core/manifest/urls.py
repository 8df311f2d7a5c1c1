"""Database URLs: parsed with an error that names what is wrong, and shown in messages and
logs without their password."""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from plateau_core.errors import InvalidInputError


def shown_url(url: str) -> str:
    """`url` with its password masked, parsed or not.

    A URL that does not parse is often one whose scheme was mistyped (`postgresql:/user:...`),
    and a password may hold an @, a slash or a colon: the text between the first colon after
    the scheme's `://` (or from the start, when a typo left it out) and the last @ is
    masked, more rather than less."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        pass
    at = url.rfind("@")
    scheme = url.find("://", 0, max(at, 0))
    colon = url.find(":", scheme + 3 if scheme >= 0 else 0, max(at, 0))
    if colon < 0:
        return url
    return f"{url[: colon + 1]}***{url[at:]}"


def parsed_url(url: str) -> URL:
    """`url` parsed.

    Raises:
        InvalidInputError: It is not a database URL (the message shows it without its
            password)."""
    try:
        return make_url(url)
    except ArgumentError:
        raise InvalidInputError(
            f"the manifest URL {shown_url(url)!r} is not a database URL "
            "(sqlite:///path, postgresql://user@host:port/db)"
        ) from None
