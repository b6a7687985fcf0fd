"""Who may open investigations when the app is served to a team.

Two optional gates, checked before any investigation (or the list of them) is shown:

- OIDC sign-in (Streamlit's `st.login`): used when `.streamlit/secrets.toml` has an `[auth]`
  section (redirect_uri, cookie_secret, client_id, client_secret, server_metadata_url; needs
  Authlib: `pip install 'twice[auth]'`).
- A shared secret: `TWICE_ACCESS_TOKEN` in the server's environment (never in a file). The
  browser asks for it once per session; it is compared in constant time and never put in a URL,
  a cookie or the page. A link to an investigation opens the prompt first, then the view.

Without either, the app is open to whoever can reach it (the default: a laptop on localhost).
"""

from __future__ import annotations

import hmac
import os
import time
from typing import Any

import streamlit as st

from twice.web.text import md_text

TOKEN_ENV = "TWICE_ACCESS_TOKEN"
_GRANTED = "twice_access_granted"  # session_state flag: this browser session gave the token
_FAILURES = "twice_access_failures"
_SIGN_IN_ERROR = "twice_sign_in_error"  # session_state: why the last "Sign in" could not start
_WRONG_TOKEN_DELAY_S = 1.0  # slows guessing; the token's length does the rest


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
        st.session_state[_SIGN_IN_ERROR] = str(exc)
        return
    st.login()


def gate() -> bool:
    """Render a sign-in or token prompt when one is needed; True when the page may go on."""
    if oidc_configured() and not _signed_in():
        st.title("twice")
        st.write("Sign in to open investigations.")
        st.button("Sign in", on_click=_sign_in, type="primary")
        if _SIGN_IN_ERROR in st.session_state:
            st.error(st.session_state.pop(_SIGN_IN_ERROR))
        return False
    expected = os.environ.get(TOKEN_ENV, "")
    if not expected or st.session_state.get(_GRANTED) is True:
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
    if given and token_matches(given, expected):
        st.session_state[_GRANTED] = True
        st.session_state.pop(_FAILURES, None)
        st.rerun()
    st.session_state[_FAILURES] = int(st.session_state.get(_FAILURES, 0)) + 1
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
    elif os.environ.get(TOKEN_ENV) and st.session_state.get(_GRANTED) is True:
        if st.button("Lock"):
            st.session_state.pop(_GRANTED, None)
            st.rerun()
