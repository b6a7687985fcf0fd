"""One redaction for every message a source gives: errors, warnings, progress lines, saved
READMEs, what the store keeps. Credentials never leave the process that was given them.

`redact(text, secrets)` removes, in this order:

- Stripe-style API keys (`sk_` / `rk_` / `pk_` + `test_` / `live_`, whole or masked as Stripe
  echoes them) -> `[api key]`;
- each secret the caller knows (a key, a password, a token; `credentials(url)` lists those a
  URL or DSN carries) wherever it re-appears -> `***`, however short (a short password masks
  letters of the words it occurs in: the message is harder to read, never a leak), in every
  form a server echoes it in: as it is; each character also URL- or form-encoded (`%XX`, `+`),
  as an HTML entity (`&amp;`, `&#39;`, `&#x27;`), JSON- or Python-escaped (`\"`, `\u0026`),
  in any mix; and base64 (standard or URL-safe, at any alignment inside a longer blob, as HTTP
  basic auth sends `user:password`);
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
from functools import lru_cache
from html.entities import codepoint2name
from urllib.parse import unquote, urlsplit

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
    known = sorted({s for s in secrets if s and s not in (MASK, API_KEY_MASK)}, key=len,
                   reverse=True)  # a secret inside another one is masked with it
    for secret in known:
        text = _encoded(secret).sub(MASK, text)
        for blob in _base64_forms(secret):
            text = text.replace(blob, MASK)
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _HTTP_TOKEN.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    text = _AUTHORIZATION.sub(lambda m: f"{m['name']}{m['scheme'] or ''}{MASK}", text)
    text = _TOKEN.sub(lambda m: f"{m['scheme']} {MASK}", text)
    return _PASSWORD_PARAM.sub(lambda m: f"{m['name']}{MASK}", text)


def _basic(user: str, password: str) -> str:
    """What an HTTP client sends for basic auth: base64 of `user:password`."""
    return base64.b64encode(f"{user}:{password}".encode()).decode()


# JSON's and Python's short escapes
_SHORT_ESCAPES = {'"': ['\\"'], "\\": ["\\\\"], "/": ["\\/"], "'": ["\\'"],
                  "\n": ["\\n"], "\r": ["\\r"], "\t": ["\\t"], "\b": ["\\b"],
                  "\f": ["\\f"], " ": ["+", "&nbsp;"]}
_MIN_BASE64 = 8  # shorter base64 runs of a secret would mask random letters of any blob


@lru_cache(maxsize=256)
def _encoded(secret: str) -> re.Pattern[str]:
    """One pattern for every way a server writes `secret`: each character as it is, `%XX` (its
    UTF-8 bytes), `&#DD;`, `&#xHH;`, its named entity, `\\uXXXX` (a pair of them past the
    BMP), or its short escape; each character independently, so any mix is matched."""
    return re.compile("".join(_character(c) for c in secret))


def _character(c: str) -> str:
    point = ord(c)
    forms = ["".join(f"%(?i:{b:02x})" for b in c.encode()),
             f"&#0*{point};", f"&#(?i:x)0*(?i:{point:x});"]
    if point in codepoint2name:
        forms.append(f"&{codepoint2name[point]};")
    if point == 39:
        forms.append("&apos;")
    if point > 0xFFFF:
        high, low = divmod(point - 0x10000, 0x400)
        forms.append(f"\\\\u(?i:{0xD800 + high:04x})\\\\u(?i:{0xDC00 + low:04x})")
    else:
        forms.append(f"\\\\u(?i:{point:04x})")
    forms += [re.escape(e) for e in _SHORT_ESCAPES.get(c, [])]
    # the character as it is last: the longest form that matches is the one masked
    return "(?:" + "|".join([*forms, re.escape(c)]) + ")"


@lru_cache(maxsize=256)
def _base64_forms(secret: str) -> tuple[str, ...]:
    """The runs of base64 characters that encode only `secret`'s bytes, at each of the three
    alignments it can have inside a longer blob, standard and URL-safe."""
    data = secret.encode()
    found: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data).decode()
        first = 1 if offset else 0  # the group that holds bytes before the secret
        full = (offset + len(data)) // 3  # groups made of the secret's bytes only, up to here
        cores = {encoded[first * 4:full * 4]}
        if offset == 0:  # the secret encoded on its own, with its last partial group
            cores |= {encoded, encoded.rstrip("=")}
        for core in cores:
            if len(core) >= _MIN_BASE64:
                found |= {core, core.replace("+", "-").replace("/", "_")}
    return tuple(sorted(found, key=len, reverse=True))
