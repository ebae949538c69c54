"""The dashboard's pure parts: escaping, the CSRF check, DST notes, the lateness chart, pages."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from schedd.client._fires import dst_notes
from schedd.dashboard import _pages as pages
from schedd.dashboard._csrf import check_token, new_cookie, new_secret, token_for
from schedd.dashboard._html import Markup, esc, lateness_svg, layout, table, tag
from schedd.v1 import execution_pb2, job_pb2

EVIL = "<script>alert(1)</script>"


def test_esc_escapes_markup_and_quotes() -> None:
    assert esc(EVIL) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert esc("a\"b'c&") == "a&quot;b&#x27;c&amp;"
    assert esc(None) == "-"
    assert esc(Markup("<b>x</b>")) == "<b>x</b>"


def test_tag_and_table_escape_content_and_attributes() -> None:
    html = tag("a", EVIL, href='/jobs/"><script>')
    assert "<script>" not in html
    assert 'href="/jobs/&quot;&gt;&lt;script&gt;"' in html
    t = table(("NAME",), [(EVIL,), (tag("b", "ok"),)])
    assert "<script>" not in t and "<b>ok</b>" in t
    assert tag("input", name="q", value=EVIL) == (
        '<input name="q" value="&lt;script&gt;alert(1)&lt;/script&gt;">'
    )


def test_layout_escapes_title_and_uses_static_assets_only() -> None:
    page = layout(EVIL, "body", node_id='n"1', actions=False)
    assert "<script>alert" not in page
    assert '<script src="/static/dash.js" defer></script>' in page
    assert "http" not in page.replace('lang="en"', "")  # nothing from another origin
    assert "read-only" in page


def test_csrf_token_matches_only_its_cookie_and_secret() -> None:
    secret, cookie = new_secret(), new_cookie()
    token = token_for(secret, cookie)
    assert check_token(secret, cookie, token)
    assert not check_token(secret, new_cookie(), token)
    assert not check_token(new_secret(), cookie, token)
    assert not check_token(secret, cookie, token[:-1] + ("0" if token[-1] != "0" else "1"))
    assert not check_token(secret, None, token)
    assert not check_token(secret, cookie, None)
    assert not check_token(secret, "", "")


def test_lateness_svg_draws_a_bar_per_run_scaled_to_the_max() -> None:
    svg = lateness_svg([("a<1>", 10), ("b", 40), ("c", 0)], width=330, height=135)
    assert svg.startswith("<svg") and svg.count('class="bar"') == 3
    assert "a&lt;1&gt;: 10 ms" in svg and "<1>" not in svg
    # inner height 100: the 40 ms bar is full height, the 10 ms one a quarter of it.
    assert 'height="100.0"' in svg and 'height="25.0"' in svg and 'height="0.0"' in svg
    assert "<script" not in svg and "href" not in svg
    assert "no started runs" in lateness_svg([])


def _ms(zone: str, *args: int, fold: int = 0) -> int:
    return int(datetime(*args, tzinfo=ZoneInfo(zone), fold=fold).timestamp() * 1000)  # type: ignore[misc]


def test_dst_notes_name_skipped_and_repeated_hours() -> None:
    zone = "America/New_York"
    spring = [_ms(zone, 2026, 3, 7, 2, 30), _ms(zone, 2026, 3, 8, 3, 30)]
    notes = dst_notes(spring, zone)
    assert (
        notes[0] == "" and "clocks went forward" in notes[1] and "UTC-05:00 → UTC-04:00" in notes[1]
    )
    autumn = [_ms(zone, 2026, 10, 31, 1, 30), _ms(zone, 2026, 11, 2, 1, 30)]
    notes = dst_notes(autumn, zone)
    assert "clocks went back" in notes[1]
    first_of_two = [_ms(zone, 2026, 11, 1, 1, 30)]
    assert "repeated hour" in dst_notes(first_of_two, zone)[0]
    assert dst_notes([0, 3_600_000], "UTC") == ["", ""]


def test_pages_escape_a_hostile_job_and_render_actions_only_with_a_token() -> None:
    job = job_pb2.Job(id="j1", name=EVIL, tenant="t<1>", next_fire_ms=1)
    job.schedule.expr = "@every 1s"
    job.handler.name = "echo"
    listing = pages.jobs_body([job], query=EVIL, state="")
    assert "<script>" not in listing and "&lt;script&gt;alert(1)&lt;/script&gt;" in listing
    assert 'href="/jobs/j1"' in listing
    read_only = pages.job_body(job, [], [], [], token=None)
    assert "<form" not in read_only and "<script>" not in read_only
    with_actions = pages.job_body(job, [], [], [], token="tok")
    assert 'action="/actions/pause/j1"' in with_actions
    assert 'name="csrf" value="tok"' in with_actions
    assert "data-confirm=" in with_actions and "<script>" not in with_actions
    dead = execution_pb2.Execution(id="j1@5", job_id="j1", error=EVIL)
    assert "action-form" not in pages.dead_body([dead], None, total=1)
    assert 'action="/actions/redrive/j1%405"' in pages.dead_body([dead], "tok", total=1)
    searched = pages.dead_body([dead], None, query=EVIL, total=3)
    assert "<script>" not in searched and "1 dead letter matches (of 3)" in searched
    assert "1 dead letter<" in pages.dead_body([dead], None, total=1)


def test_dead_letter_search_matches_job_execution_tenant_and_error() -> None:
    dead = execution_pb2.Execution(
        id="j-7@5", job_id="j-7", job_name="Nightly", tenant="acme", error="HTTP 503"
    )
    for q in ("", "night", "j-7@", "ACME", "503"):
        assert pages.dead_matches(dead, q), q
    assert not pages.dead_matches(dead, "weekly")


def test_job_search_matches_name_id_tenant_labels_and_state() -> None:
    job = job_pb2.Job(id="abc", name="Nightly", tenant="acme", paused=True)
    job.labels["team"] = "data"
    assert pages.matches(job, "night", "")
    assert pages.matches(job, "ACME", "paused")
    assert pages.matches(job, "team=data", "")
    assert not pages.matches(job, "night", "active")
    assert not pages.matches(job, "zzz", "")


def test_lateness_body_reports_percentiles_of_started_runs() -> None:
    runs = [
        execution_pb2.Execution(id=f"j@{i}", due_ms=1000 * i, started_ms=1000 * i + i)
        for i in range(1, 101)
    ]
    runs.append(execution_pb2.Execution(id="j@0", due_ms=5))  # not started: left out
    body = pages.lateness_body(runs)
    assert "<td>100</td>" in body and "<td>51 ms</td>" in body and "<td>100 ms</td>" in body


def test_the_metrics_section_shows_the_recorders_histograms_per_bucket() -> None:
    inf = float("inf")
    kept = {"schedd_fire_delay_seconds": [(0.01, 2), (0.1, 3), (inf, 1)]}
    body = pages.metrics_body(lambda name: kept.get(name, []))
    assert "schedd_fire_delay_seconds" in body and body.count('class="bar"') == 3
    assert "<td>0.01</td><td>2</td>" in body and "<td>+Inf</td><td>1</td>" in body
    assert "schedd_start_lateness_seconds" not in body  # not kept by this recorder
    assert pages.metrics_body(lambda _name: []) == ""  # a recorder that keeps none
    empty = {"schedd_fire_delay_seconds": [(0.01, 0), (inf, 0)]}
    assert "no observations yet" in pages.metrics_body(lambda name: empty.get(name, []))
