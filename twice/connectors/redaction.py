"""One redaction for every message a source gives: errors, warnings, progress lines, saved
READMEs, what the store keeps. Credentials never leave the process that was given them.

`redact(text, secrets)` removes, in this order:

- Stripe-style API keys (`sk_` / `rk_` / `pk_` + `test_` / `live_`, whole or masked as Stripe
  echoes them) -> `[api key]`;
- each secret the caller knows (a key, a password, a token; `credentials(url)` lists those a
  URL or DSN carries) wherever it re-appears, as it is, URL-encoded, or as the base64 of
  HTTP basic auth -> `***`, however short (a short password masks letters of the words it
  occurs in: the message is harder to read, never a leak);
- the password in a URL's userinfo (`scheme://user:***@host`), and a bare userinfo of an HTTP
  URL (`https://***@host`: a user with no password there is a token);
- the credentials of an `Authorization` header, and basic / bearer tokens wherever they are
  echoed -> `Basic ***`, `Bearer ***`;
- `password=...` (and `passwd`, `pwd`) in DSNs, query strings and echoed bodies -> `***`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import quote, unquote, urlsplit

__all__ = ["MASK", "credentials", "redact"]

MASK = "***"
API_KEY_MASK = "[api key]"

_API_KEY = re.compile(r"\b(?:sk|rk|pk)_(?:test|live)_[0-9A-Za-z*•.…]+")
# user:password@ in a URL; the password may hold unencoded "@" (greedy up to the last "@")
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):[^/\s]*@",
                           re.I)
# https://token@host (also jaeger+http://, wss://): a user with no password is a token
_HTTP_TOKEN = re.compile(r"(?P<scheme>\b(?:[a-z][a-z0-9.-]*\+)?(?:https?|wss?)://)[^:/\s]+@",
                         re.I)
_AUTHORIZATION = re.compile(
    r"(?P<name>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)(?P<scheme>[A-Za-z]+\s+)?"
    r"[^\s\"',;}]+", re.I)
# a token after Basic / Bearer: base64 / token68 with a digit, capital or +/= in it (so the
# words of "Basic authentication failed" stay)
_TOKEN = re.compile(r"\b(?P<scheme>(?i:basic|bearer))\s+(?!(?i:realm)\b)"
                    r"(?=[A-Za-z0-9._~+/-]*[0-9A-Z+/])[A-Za-z0-9._~+/-]{6,}=*")
_PASSWORD_PARAM = re.compile(r"(?P<name>\b(?:password|passwd|pwd)[\"']?\s*[=:]\s*[\"']?)"
                             r"(?!\*\*\*)[^\"'&\s,;}]+", re.I)


def credentials(target: str | None) -> list[str]:
    """The secrets a URL or DSN carries, for `redact(..., secrets)`: its password (also as the
    base64 of `user:password`, what HTTP basic auth sends), or a bare user on an HTTP URL (a
    token), and a `password=` parameter. Empty when it carries none."""
    if not target:
        return []
    found: list[str] = []
    try:
        parts = urlsplit(target.strip())
        user, password, scheme = parts.username, parts.password, parts.scheme.lower()
    except ValueError:
        user = password = None
        scheme = ""
    if password:
        found += [unquote(password), password, _basic(unquote(user or ""), unquote(password))]
    elif user and scheme.rpartition("+")[2] in ("http", "https", "ws", "wss"):
        found += [unquote(user), user, _basic(unquote(user), "")]
    for match in re.finditer(r"\bpassword=([^&\s]+)", target, re.I):
        found += [match.group(1), unquote(match.group(1))]
    return list(dict.fromkeys(s for s in found if s))


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` without credentials (the module's docstring says which), safe to show, log or
    store."""
    text = _API_KEY.sub(API_KEY_MASK, text)
    for secret in _forms(secrets):
        text = text.replace(secret, MASK)
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _HTTP_TOKEN.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    text = _AUTHORIZATION.sub(lambda m: f"{m['name']}{m['scheme'] or ''}{MASK}", text)
    text = _TOKEN.sub(lambda m: f"{m['scheme']} {MASK}", text)
    return _PASSWORD_PARAM.sub(lambda m: f"{m['name']}{MASK}", text)


def _basic(user: str, password: str) -> str:
    """What an HTTP client sends for basic auth: base64 of `user:password`."""
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def _forms(secrets: Iterable[str | None]) -> list[str]:
    """Each secret as given and URL-encoded, longest first (a secret inside another one is
    masked with it)."""
    forms: set[str] = set()
    for secret in secrets:
        if secret and secret not in (MASK, API_KEY_MASK):
            forms.update({secret, quote(secret, safe=""), quote(secret)})
    return sorted(forms, key=len, reverse=True)
