"""The web app (`twice web`): `main.py` is the script Streamlit runs; `nav` its pages, `views`
one module per page, `tabs` an investigation's tabs. `figures`, `report_html` and `export` are
pure (no Streamlit): what the pages render and download, testable without a browser."""
