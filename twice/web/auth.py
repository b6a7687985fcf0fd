"""Who may open investigations when the app is served to a team.

Two optional gates, checked before any investigation (or the list of them) is shown:

- OIDC sign-in (Streamlit's `st.login`): used when `.streamlit/secrets.toml` has an `[auth]`
  section (redirect_uri, cookie_secret, client_id, client_secret, server_metadata_url; needs
  Authlib: `pip install 'twice[auth]'`).
- A shared secret: `TWICE_ACCESS_TOKEN` in the server's environment (never in a file). The
  browser asks for it once per session; it is compared in constant time and never put in a URL,
  a cookie or the page. A link to an investigation opens the prompt first, then the view.

Without either, the app is open to whoever can reach it (the default: a laptop on localhost).

What the browser sends is not trusted: the gate's state is one object only this module writes
(a value a client sends under its key is not that object, so it opens nothing), and widget
values sent under ids no widget has (only a hand-made websocket message does that) are
neutralised before the page runs (`neutralise_forged_widget_states`).
"""

from __future__ import annotations

import hmac
import os
import time
from dataclasses import dataclass
from typing import Any

import streamlit as st

from twice.web.text import md_text

TOKEN_ENV = "TWICE_ACCESS_TOKEN"
_ACCESS = "twice_access"  # session_state: this browser session's `_Access`
_WRONG_TOKEN_DELAY_S = 1.0  # slows guessing; the token's length does the rest
_WIDGET_ID_PREFIX = "$$"  # Streamlit's widget ids ("$$ID-...") and internal keys


@dataclass
class _Access:
    """The gate's state for one browser session. Only this module makes one, so a value sent
    from the browser under the same key (bool, text, number) is never mistaken for it."""

    granted: bool = False  # this session gave the token
    failures: int = 0
    sign_in_error: str | None = None  # why the last "Sign in" could not start


def _access() -> _Access:
    state = st.session_state.get(_ACCESS)
    if not isinstance(state, _Access):
        state = _Access()
        st.session_state[_ACCESS] = state
    return state


def neutralise_forged_widget_states() -> None:
    """Make widget values the browser sent under ids that are not widget ids harmless.

    Streamlit's own browser code only sends ids of widgets it drew (`$$ID-...`); anything else
    came from a hand-made websocket message, e.g. one naming the gate's session key. Streamlit
    cannot decode such a value (no widget describes it): reading the key fails, and so does the
    next widget drawn (it reads every key: a KeyError, with a traceback). A value of our own
    under that key (None) is read instead. Run before any widget is drawn."""
    try:
        from streamlit.runtime.state import get_session_state

        sent = [w.id for w in get_session_state().get_widget_states()]
    except Exception:  # noqa: BLE001 - another Streamlit: nothing to neutralise this way
        return
    for widget_id in sent:
        # a widget's own id, or a key that reads as a value of ours (read before a forged one)
        if widget_id.startswith(_WIDGET_ID_PREFIX) or widget_id in st.session_state:
            continue
        st.session_state[widget_id] = None


def oidc_configured() -> bool:
    """True when secrets.toml has an [auth] section (Streamlit then enables st.login)."""
    try:
        from streamlit.runtime.secrets import secrets_singleton

        return secrets_singleton.load_if_toml_exists() and "auth" in secrets_singleton
    except Exception:  # noqa: BLE001 - a broken secrets.toml is reported by Streamlit itself
        return False


def token_matches(given: str, expected: str) -> bool:
    """Constant-time comparison (of the UTF-8 bytes: compare_digest takes ASCII str only)."""
    return hmac.compare_digest(given.encode(), expected.encode())


def require_auth_extra() -> None:
    """st.login needs Authlib, which only the `auth` extra installs."""
    try:
        import authlib  # noqa: F401
    except ImportError:
        raise ImportError("Sign-in (an [auth] section in .streamlit/secrets.toml) needs Authlib, "
                          "which is not installed: install twice with "
                          "`pip install 'twice[auth]'`.") from None


def _sign_in() -> None:
    try:
        require_auth_extra()
    except ImportError as exc:
        _access().sign_in_error = str(exc)
        return
    st.login()


def gate() -> bool:
    """Render a sign-in or token prompt when one is needed; True when the page may go on."""
    if oidc_configured() and not _signed_in():
        st.title("twice")
        st.write("Sign in to open investigations.")
        st.button("Sign in", on_click=_sign_in, type="primary")
        access = _access()
        if access.sign_in_error:
            st.error(access.sign_in_error)
            access.sign_in_error = None
        return False
    expected = os.environ.get(TOKEN_ENV, "")
    if not expected or _access().granted:
        return True
    return _token_prompt(expected)


def _signed_in() -> bool:
    user: Any = st.user
    return bool(user.get("is_logged_in", False))


def _token_prompt(expected: str) -> bool:
    st.title("twice")
    st.write("This twice is shared with a team: enter the access token to open investigations.")
    # a form, cleared on submit: the token is sent once over the app's websocket and kept
    # neither in the widget's state nor in the URL (query parameters are left as they are,
    # so the link that was opened shows its view once the token is accepted)
    with st.form("access", clear_on_submit=True):
        given = st.text_input("Access token", type="password")
        submitted = st.form_submit_button("Open")
    if not submitted:
        return False
    access = _access()
    if isinstance(given, str) and given and token_matches(given, expected):
        access.granted, access.failures = True, 0
        st.rerun()
    access.failures += 1
    time.sleep(_WRONG_TOKEN_DELAY_S)
    st.error("That is not the access token.")
    return False


def sign_out_button() -> None:
    """In the sidebar: sign out (OIDC) or forget the token for this session."""
    if oidc_configured() and _signed_in():
        user: Any = st.user
        who = str(user.get("email") or user.get("name") or "you")
        st.caption(f"Signed in as {md_text(who)}")
        st.button("Sign out", on_click=st.logout)
    elif os.environ.get(TOKEN_ENV) and _access().granted:
        if st.button("Lock"):
            _access().granted = False
            st.rerun()
