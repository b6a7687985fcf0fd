"""One module per page of the app (`twice.web.nav` makes them `st.navigation` pages; not a
`pages/` folder, which Streamlit would take for its legacy multipage layout). Each `render()`
reads the URL state, calls the core and renders."""
