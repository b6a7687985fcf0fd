"""The twice web app: `twice web` (or `streamlit run twice/web/main.py`).

The pages are `st.navigation` pages (`twice.web.nav`), one module each in `twice.web.views`;
this script gates access, routes a link to its page, draws the sidebar and runs the page. A
page reads the URL state, calls the core, renders. Every view is reproducible from its URL
(investigation, group, duplicate, tab, time window, clock), and links never carry secrets.
"""

from __future__ import annotations

import streamlit as st

from twice.formats import log_visibly
from twice.store import Store, StoreError
from twice.store.links import ViewState
from twice.web import auth, forms, nav
from twice.web.cache import get_store
from twice.web.problems import store_problem


def sidebar(store: Store) -> None:
    st.markdown("## twice")
    st.caption("Where did one intended call become two?")
    if st.button("All incidents", width="stretch"):
        nav.go(ViewState())
    if st.button("Sweeps", width="stretch"):
        nav.open_view(nav.SWEEPS, {"sweep": "all"})
    if st.button("Drills", width="stretch"):
        nav.open_view(nav.DRILLS, {"drill": "new"})
    with st.expander("New investigation from files"):
        forms.upload_form(store)
    with st.expander("New investigation from live sources"):
        forms.live_form(store)
    auth.sign_out_button()


def main() -> None:
    log_visibly()  # what libraries log about the evidence lands in the server's log
    st.set_page_config(page_title="twice", page_icon="⧉", layout="wide")
    auth.neutralise_forged_widget_states()  # before any widget: values only a forged message sends
    # the sidebar's buttons are the way between pages: they set the query a view needs
    page = st.navigation(list(nav.pages().values()), position="hidden")
    if not auth.gate():  # served to a team: sign-in or the shared token first (auth.py)
        return
    try:
        store = get_store()
    except StoreError as exc:
        st.error(store_problem(exc, "Investigations cannot be shown"))
        return
    with st.sidebar:
        sidebar(store)
    view = nav.view_for(st.query_params.to_dict(), nav.name_of(page))
    try:
        if view == nav.name_of(page):
            page.run()
        else:  # a link that names its view by the query alone: shown as it was opened
            nav.renderers()[view]()
    except StoreError as exc:  # said plainly, without the store's path or a traceback
        st.error(store_problem(exc, "This page cannot be shown"))


main()
