"""Links out (twice.web.links_out): only ids of a strict pattern enter a URL."""

from __future__ import annotations

from twice.web.links_out import (
    TRACE_URL_ENV,
    links_out,
    livemodes,
    record_ids,
    stripe_links,
    trace_link,
    trace_template,
)

TEMPLATE = "http://jaeger:16686/trace/{trace_id}"
TRACE = "3eab329ca0e72b6d5ee80e1b24c0ff81"


def test_stripe_ids_open_their_dashboard_page_in_the_records_mode() -> None:
    assert [x.url for x in stripe_links("pi_3PVHWDWrcAXdGAH5", livemode=True)] == [
        "https://dashboard.stripe.com/payments/pi_3PVHWDWrcAXdGAH5"]
    assert [x.url for x in stripe_links("ch_3PVHWDWrcAXdGAH5", livemode=False)] == [
        "https://dashboard.stripe.com/test/payments/ch_3PVHWDWrcAXdGAH5"]
    # a mode not said: both, each named
    both = stripe_links("req_OKJqqu67jSoHow")
    assert [x.url for x in both] == ["https://dashboard.stripe.com/logs/req_OKJqqu67jSoHow",
                                     "https://dashboard.stripe.com/test/logs/req_OKJqqu67jSoHow"]
    assert "live" in both[0].label and "test" in both[1].label


def test_hostile_ids_get_no_link() -> None:
    for value in ("pi_abc\"><script>alert(1)</script>", "pi_../../settings", "ch_12345 6789",
                  "req_", "cus_AAAAAAAAAA", "pi_" + "a" * 65, "javascript:alert(1)",
                  "pi_abcdefg\n", "PI_ABCDEFGH", "pi_ａｂｃｄｅｆｇ", None, 42):
        assert stripe_links(value) == [], value
    for value in (TRACE.upper(), TRACE + "0", TRACE[:-1] + "g", "../" + TRACE, None):
        assert trace_link(value, TEMPLATE) == [], value


def test_the_trace_template_is_the_servers_setting_checked() -> None:
    assert trace_template({TRACE_URL_ENV: TEMPLATE}) == TEMPLATE
    assert [x.url for x in trace_link(TRACE, TEMPLATE)] == [
        f"http://jaeger:16686/trace/{TRACE}"]
    grafana = "https://tempo.example/explore?trace={trace_id}&orgId=1"
    assert trace_template({TRACE_URL_ENV: grafana}) == grafana
    for bad in ("", "javascript:alert('{trace_id}')", "http://jaeger:16686/trace/",
                "ftp://x/{trace_id}", "http://x/{trace_id})<b>", "http://x/ {trace_id}"):
        assert trace_template({TRACE_URL_ENV: bad}) is None, bad
    assert trace_link(TRACE, None) == []  # no viewer configured: no trace link


def test_a_records_links_each_once() -> None:
    row = {"object_id": "ch_3PVHWDWrcAXdGAH5", "belongs_to": "pi_3PVHWDWrcAXdGAH5",
           "request_id": "req_OKJqqu67jSoHow", "trace_id": TRACE}
    ids, traces = record_ids(row)
    links = links_out([*ids, *ids], [*traces, *traces], template=TEMPLATE, livemode=False)
    assert [x.url for x in links] == [
        "https://dashboard.stripe.com/test/payments/ch_3PVHWDWrcAXdGAH5",
        "https://dashboard.stripe.com/test/payments/pi_3PVHWDWrcAXdGAH5",
        "https://dashboard.stripe.com/test/logs/req_OKJqqu67jSoHow",
        f"http://jaeger:16686/trace/{TRACE}"]


def _timeline(rows: list[dict[str, object]]):  # type: ignore[no-untyped-def]
    from twice.timeline import make_timeline

    base = {"at": 1_741_000_000_000_000_000, "source": "stripe_events",
            "kind": "provider_event"}
    return make_timeline([{**base, **r} for r in rows])


def test_each_id_links_in_the_mode_its_records_say() -> None:
    live = _timeline([
        {"object_id": "ch_LIVE00000001", "belongs_to": "pi_LIVE00000001",
         "request_id": "req_LIVE0000001", "livemode": 1},
        {"object_id": "ch_TEST00000001", "request_id": "req_TEST0000001", "livemode": 0},
        {"source": "spans", "kind": "http_span", "request_id": "req_SPAN0000001"},
    ])
    ids = ["ch_LIVE00000001", "pi_LIVE00000001", "req_TEST0000001", "req_SPAN0000001",
           "cus_NOTLINKED", None]
    modes = livemodes(live, ids)
    # the parent payment named in belongs_to; the evidence disagrees: an id nobody names has
    # no mode
    assert modes == {"ch_LIVE00000001": True, "pi_LIVE00000001": True,
                     "req_TEST0000001": False}
    links = links_out(ids, [], template=None, modes=modes)
    assert [x.url for x in links] == [
        "https://dashboard.stripe.com/payments/ch_LIVE00000001",
        "https://dashboard.stripe.com/payments/pi_LIVE00000001",
        "https://dashboard.stripe.com/test/logs/req_TEST0000001",
        "https://dashboard.stripe.com/logs/req_SPAN0000001",  # not known: both, each named
        "https://dashboard.stripe.com/test/logs/req_SPAN0000001"]


def test_an_id_no_record_names_takes_the_mode_all_the_evidence_agrees_on() -> None:
    test_only = _timeline([{"object_id": "ch_TEST00000001", "livemode": 0},
                           {"source": "stripe_logs", "kind": "provider_request",
                            "request_id": "req_TEST0000002", "livemode": 0}])
    assert livemodes(test_only, ["req_SPAN0000001"]) == {"req_SPAN0000001": False}
    unsaid = _timeline([{"object_id": "ch_TEST00000001"}])  # a request log: no mode
    assert livemodes(unsaid, ["ch_TEST00000001"]) == {}
