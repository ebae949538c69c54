"""The dashboard in headless Chromium against a real node, worker and etcd: the pages show what
the API shows, escaped; the runs page updates live; read-only means no forms and 403 on POST;
with actions on, pause, resume and redrive work through the confirm dialogs.

SCHEDD_SCREENSHOTS=1 saves a screenshot of each page to docs/dashboard/<page>.png.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from integration.cluster_harness import Harness, eventually
from schedd.dashboard import DashboardServer
from schedd.dev import EtcdProcess
from schedd.node import Node
from schedd.v1 import execution_pb2

MANUAL = execution_pb2.TRIGGER_MANUAL

pytestmark = pytest.mark.timeout(120)

CHROMIUM = os.environ.get("SCHEDD_CHROMIUM", "/usr/bin/chromium")
# Job names may not contain "/": a tag that would run script if it were not escaped.
EVIL = '<img src=x onerror=alert(1)><script>alert(2)<script> & "co"\''

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "dashboard"


def _need_browser() -> Any:
    """Playwright's async API, or a skip (a failure under CI) when it or Chromium is missing."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        missing = "the playwright package (pip install -e '.[dev]')"
    else:
        if shutil.which(CHROMIUM) or Path(CHROMIUM).is_file():
            return async_playwright
        missing = f"Chromium at {CHROMIUM} (make etcd installs Debian's chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"the dashboard browser test needs {missing}")
    pytest.skip(f"needs {missing}")


@pytest.fixture
async def h(etcd_server: EtcdProcess, etcd_prefix: bytes, tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(etcd_server.endpoint, etcd_prefix, tmp_path)
    await harness.start_node(
        http_listen="127.0.0.1:0", http_actions=True, metrics_listen="127.0.0.1:0"
    )
    await harness.start_worker()
    try:
        yield harness
    finally:
        await harness.close()


async def _shot(page: Any, name: str) -> None:
    if os.environ.get("SCHEDD_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def _post(url: str, **kwargs: Any) -> int:
    async with aiohttp.ClientSession() as session, session.post(url, **kwargs) as resp:
        assert resp.headers["X-Frame-Options"] == "DENY"
        return resp.status


@pytest.fixture
def async_playwright() -> Any:
    """Checked before the node starts: a skip costs nothing."""
    return _need_browser()


async def test_dashboard_pages_live_runs_and_actions(async_playwright: Any, h: Harness) -> None:
    node: Node = h.nodes[0]
    dashboard = h.dashboard(node)
    assert dashboard.actions
    client = await h.connect()
    evil = (await client.create_job(EVIL, schedule="@every 1h", handler="echo")).job
    ticker = (await client.create_job("ticker", schedule="@every 1s", handler="echo")).job
    monthly = (
        await client.create_job(
            "monthly-report", schedule="30 2 8 * *", tz="America/New_York", handler="echo"
        )
    ).job
    doomed = (
        await client.create_job("doomed", schedule="@after 1s", handler="fail", max_attempts=1)
    ).job
    dead = await eventually(
        lambda: client.list_dead_letters(job_id=doomed.id),
        lambda d: len(d) == 1,
        what="a dead letter",
    )
    await eventually(lambda: h.runs(ticker.id), lambda r: len(r) >= 1, what="ticker runs")
    read_only = DashboardServer(node.surface(), "127.0.0.1:0", actions=False)
    await read_only.start()
    base, ro = dashboard.url, read_only.url
    alerts: list[str] = []
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
            )
            page = await browser.new_page(viewport={"width": 1200, "height": 800})
            page.on("dialog", lambda d: alerts.append(d.message))

            # Cluster: every partition's owner and epoch as the API has them; the worker.
            status = await client.cluster_status()
            resp = await page.goto(base)
            assert resp is not None and resp.status == 200
            assert resp.headers["content-security-policy"].startswith("default-src 'self'")
            assert resp.headers["x-content-type-options"] == "nosniff"
            for p in status.partitions:
                row = page.locator("#partitions tbody tr").nth(p.partition)
                assert await row.locator("td").all_inner_texts() == [
                    str(p.partition),
                    p.owner,
                    str(p.epoch),
                ]
            assert "n1" in await page.locator("#nodes").inner_text()
            assert "w1" in await page.locator("#workers").inner_text()
            assert "reachable" in await page.locator("main").inner_text()
            await _shot(page, "cluster")

            # Jobs: the hostile name shows as text (no script ran); search narrows the list.
            await page.goto(base + "jobs")
            table = await page.locator("#jobs").inner_text()
            for job in (evil, ticker, doomed):
                assert job.id in table
            assert EVIL in table
            assert await page.locator("main img, main script").count() == 0
            # Schedules in words with their zone, the expression on hover; state badges; the
            # last run with its outcome; ids whole on one line, at 1000 px as at 1920 px.
            monthly_row = page.locator("#jobs tbody tr", has_text="monthly-report")
            cells = await monthly_row.locator("td").all_inner_texts()
            assert cells[1] == "at 02:30 on day 8 of the month, America/New_York"
            assert await monthly_row.locator("td span[title]").get_attribute("title") == (
                "30 2 8 * *"
            )
            assert cells[4] == "active"
            badge = monthly_row.locator(".badge.st-active")
            assert await badge.count() == 1
            ticker_row = page.locator("#jobs tbody tr", has_text="ticker")
            assert await ticker_row.locator("td:nth-child(4) .badge").count() == 1
            for width in (1000, 1920):
                await page.set_viewport_size({"width": width, "height": 800})
                ids = page.locator("#jobs .id")
                line = await page.locator("#jobs thead th").first.bounding_box()  # one line
                for n in range(await ids.count()):
                    box = await ids.nth(n).bounding_box()
                    assert box is not None and line is not None
                    assert box["height"] <= line["height"], (width, box, line)
                await _shot(page, f"jobs-{width}")
            await page.set_viewport_size({"width": 1200, "height": 800})
            await _shot(page, "jobs")
            await page.fill("#q", "tick")
            await page.click("form.filter button")
            await page.wait_for_url("**/jobs?q=tick*")
            names = await page.locator("#jobs tbody tr td:first-child").all_inner_texts()
            assert names == ["ticker"]

            # A job's page: spec, next fires in its zone, recent runs.
            await page.goto(f"{base}jobs/{evil.id}")
            assert EVIL in await page.locator("h1").inner_text()
            assert await page.locator("#fires tbody tr").count() == 12
            # A monthly job in New York: 12 fires span a DST change, noted on its fire.
            await page.goto(f"{base}jobs/{monthly.id}")
            fires = await page.locator("#fires").inner_text()
            assert "LOCAL (America/New_York)" in fires and "DST: clocks went" in fires
            await _shot(page, "job")
            await page.goto(f"{base}jobs/{ticker.id}")
            assert await page.locator("#job-runs tbody tr").count() >= 1
            # The run timeline: one mark per recent run, coloured by its state.
            marks = page.locator("#job-timeline .mark")
            assert await marks.count() == await page.locator("#job-runs tbody tr").count()
            assert await page.locator("#job-timeline .mark.st-SUCCEEDED").count() >= 1
            title = await marks.first.get_attribute("title") or ""  # the oldest: done
            assert title.endswith(": SUCCEEDED") and "+0000" in title, title

            # Runs: a new run appears without a reload.
            await page.goto(base + "runs")
            await page.evaluate("window.__noReload = true")
            before = set(await page.locator("#runs tbody tr td:first-child").all_inner_texts())
            api_ids = {r.id for r in await h.runs(ticker.id)}
            assert api_ids & before
            await page.wait_for_function(
                "n => document.querySelectorAll('#runs tbody tr').length > n"
                " || document.getElementById('live-status').textContent.includes('updated')",
                arg=len(before), timeout=15_000,
            )  # fmt: skip
            await eventually(
                lambda: page.locator("#runs tbody tr td:first-child").all_inner_texts(),
                lambda ids: bool(set(ids) - before),
                what="a new run on the live page",
            )
            assert await page.evaluate("window.__noReload") is True
            # The job column names the job and links to its page (by id), also after the
            # live update re-rendered it.
            link = page.locator("#runs tbody tr td:nth-child(2) a", has_text="ticker").first
            assert await link.get_attribute("href") == f"/jobs/{ticker.id}"
            await _shot(page, "runs")

            # Search: it stays in the URL and the box, and the live update keeps to it.
            await page.goto(base + "runs?q=doom")
            assert await page.input_value("#q") == "doom"
            await eventually(
                lambda: page.locator("#live-status").inner_text(),
                lambda text: "updated" in text,
                what="the filtered runs updated live",
            )
            jobs_shown = await page.locator("#runs tbody tr td:nth-child(2)").all_inner_texts()
            assert jobs_shown and set(jobs_shown) == {"doomed"}, jobs_shown

            # Dead letters and the lateness chart.
            # The state filter: only dead runs.
            await page.goto(base + "runs?state=DEAD")
            states = await page.locator("#runs tbody tr td:nth-child(4)").all_inner_texts()
            assert states == ["DEAD"]
            await page.goto(base + "dead")
            assert dead[0].id in await page.locator("#dead").inner_text()
            doomed_cell = page.locator("#dead tbody tr td:nth-child(2)")
            assert await doomed_cell.inner_text() == "doomed"  # the job's name, linked
            assert await doomed_cell.locator("a").get_attribute("href") == f"/jobs/{doomed.id}"
            await _shot(page, "dead")
            # Its search stays in the URL and the box; a miss says so.
            await page.fill("#q", "DOOM")
            await page.click("form.filter button")
            await page.wait_for_url("**/dead?q=DOOM")
            assert await page.input_value("#q") == "DOOM"
            assert "matches (of " in await page.locator("#dead-count").inner_text()
            assert await doomed_cell.inner_text() == "doomed"
            await page.goto(base + "dead?q=no-such-thing")
            assert await page.locator("#dead").count() == 0
            assert "no dead letters match" in await page.locator("main").inner_text()
            # A one-shot that has fired is completed: nothing left to pause.
            await page.goto(f"{base}jobs/{doomed.id}")
            assert await page.locator("#job-state").inner_text() == "completed"
            assert await page.locator("#pause-button").count() == 0
            assert await page.locator("#trigger-button").count() == 1
            # "All its runs" opens the runs page searched by the job's id.
            await page.click("#all-runs")
            await page.wait_for_url(f"**/runs?q={doomed.id}")
            shown = await page.locator("#runs tbody tr td:nth-child(2)").all_inner_texts()
            assert shown and set(shown) == {"doomed"}, shown
            await page.goto(base + "lateness")
            assert await page.locator("svg.chart rect.bar").count() >= 1
            # With metrics on, the node's fire-delay histogram since it started too (empty
            # here: the worker holds its runs ahead and starts them on its own timer).
            assert "schedd_fire_delay_seconds" in await page.locator("main").inner_text()
            await _shot(page, "lateness")

            # Read-only: no forms at all, and a POST is refused.
            await page.goto(f"{ro}jobs/{ticker.id}")
            assert await page.locator("form.action-form").count() == 0
            await page.goto(ro + "dead")
            assert await page.locator("form.action-form").count() == 0
            assert await _post(f"{ro}actions/pause/{ticker.id}", data={"csrf": "x"}) == 403
            assert not (await client.get_job(ticker.id)).paused

            # Actions on: a POST without the browser's cookie and token is refused.
            assert await _post(f"{base}actions/pause/{ticker.id}", data={"csrf": "x"}) == 403
            assert not (await client.get_job(ticker.id)).paused

            # Dismissing the confirm does nothing; accepting pauses, then resumes.
            await page.goto(f"{base}jobs/{ticker.id}")
            await _confirm(page, "#pause-button", accept=False)
            await asyncio.sleep(0.3)
            assert not (await client.get_job(ticker.id)).paused
            await _confirm(page, "#pause-button", accept=True)
            await page.wait_for_url(f"**/jobs/{ticker.id}")
            assert await page.locator("#job-state").inner_text() == "paused"
            assert (await client.get_job(ticker.id)).paused
            await _confirm(page, "#resume-button", accept=True)
            await page.wait_for_selector("#pause-button")
            assert not (await client.get_job(ticker.id)).paused

            # Trigger: a manual run of the (hourly) job starts now.
            runs_before = {r.id for r in await h.runs(evil.id)}
            await page.goto(f"{base}jobs/{evil.id}")
            await _confirm(page, "#trigger-button", accept=True)
            await page.wait_for_url(f"**/jobs/{evil.id}")
            await eventually(
                lambda: h.runs(evil.id),
                lambda r: any(x.id not in runs_before and x.trigger == MANUAL for x in r),
                what="the triggered run",
            )

            # Redrive: the dead letter runs again (and dies again: the handler always fails).
            failed_before = len(h.calls.get("fail", []))
            await page.goto(base + "dead")
            await _confirm(page, "#redrive-button", accept=True)
            await page.wait_for_url("**/dead")
            await eventually(
                lambda: asyncio.sleep(0, result=len(h.calls.get("fail", []))),
                lambda n: n > failed_before,
                what="the redriven run",
            )
            # Its job deleted, a dead letter names the id, and links nowhere (no 404).
            await eventually(
                lambda: client.list_dead_letters(job_id=doomed.id),
                lambda d: len(d) == 1,
                what="the redriven run dead again",
            )
            await client.delete_job(doomed.id)
            await page.goto(base + "dead")
            assert await doomed_cell.inner_text() == f"{doomed.id} (deleted)"
            assert await doomed_cell.locator("a").count() == 0
            await browser.close()
    finally:
        await read_only.stop()
    assert not [a for a in alerts if a in ("1", "2")], alerts


async def _confirm(page: Any, selector: str, *, accept: bool) -> None:
    """Clicks ``selector`` and answers the confirm dialog it opens."""

    async def answer(dialog: Any) -> None:
        assert dialog.type == "confirm"
        await (dialog.accept() if accept else dialog.dismiss())

    page.once("dialog", answer)
    await page.click(selector)
