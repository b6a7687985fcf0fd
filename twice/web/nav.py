"""The app's pages (`st.navigation`) and how a view is opened.

The URL is the state. A page's path says which page (`/sweeps`), its query string what it
shows (`?sweep=ID`). Links name their view by the query alone (`/?inv=...&tab=verdict`,
`/?sweep=all`, `/?drill=L2-4711`: the links the app, the sweep and the command line print, and
every link made before the pages existed), so the query wins: a query naming another page's
view is shown by that page's `render`, under the link as it was opened (`view_for`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import streamlit as st
from streamlit.navigation.page import StreamlitPage

from twice.store.links import ViewState, from_query, to_query

INCIDENTS, INVESTIGATION, SWEEPS, DRILLS, CUSTOMER = (
    "incidents", "investigation", "sweeps", "drills", "customer")


def renderers() -> dict[str, Callable[[], None]]:
    """Each page's `render`, by name."""
    from twice.web.views import customer, drills, incidents, investigation, sweeps

    return {INCIDENTS: incidents.render, INVESTIGATION: investigation.render,
            SWEEPS: sweeps.render, DRILLS: drills.render, CUSTOMER: customer.render}


def pages() -> dict[str, StreamlitPage]:
    """Every page, by name: what `st.navigation` is given and what `open_view` switches to."""
    render = renderers()
    return {
        INCIDENTS: st.Page(render[INCIDENTS], title="Incidents", url_path=INCIDENTS,
                           default=True),
        INVESTIGATION: st.Page(render[INVESTIGATION], title="Investigation",
                               url_path=INVESTIGATION, visibility="hidden"),
        SWEEPS: st.Page(render[SWEEPS], title="Sweeps", url_path=SWEEPS),
        DRILLS: st.Page(render[DRILLS], title="Drills", url_path=DRILLS),
        CUSTOMER: st.Page(render[CUSTOMER], title="Customer", url_path=CUSTOMER,
                          visibility="hidden"),
    }


def name_of(page: StreamlitPage) -> str:
    return INCIDENTS if page.url_path in ("", INCIDENTS) else page.url_path


def view_for(query: Mapping[str, str], current: str) -> str:
    """The page a query string asks for (`?sweep`, then `?drill`, then `?customer`, then
    `?inv`), else the one the path named; an investigation page without an investigation is
    the incidents list."""
    if "sweep" in query:
        return SWEEPS
    if "drill" in query:
        return DRILLS
    if "customer" in query:
        return CUSTOMER
    if from_query(query).inv is not None:
        return INVESTIGATION
    return INCIDENTS if current == INVESTIGATION else current


def open_view(name: str, query: Mapping[str, str]) -> None:
    """Switch to page `name` with this query string (the rest of this run does not happen)."""
    st.switch_page(pages()[name], query_params=dict(query))


def go(state: ViewState) -> None:
    """Move to an investigation view (or the incidents list): the URL is the state."""
    open_view(INVESTIGATION if state.inv else INCIDENTS, to_query(state))


def show(state: ViewState) -> None:
    """For a widget's callback: the URL becomes this view, and the run the widget started
    (which follows the callback) draws it. One run, where `go` from the page costs two (the
    one that saw the widget change, then the switched page's)."""
    st.query_params.from_dict(to_query(state))


def base_url() -> str:
    """This page's address without its query (a link to a view adds its own)."""
    try:
        return str(st.context.url).split("?")[0]
    except AttributeError:  # older Streamlit
        return ""
