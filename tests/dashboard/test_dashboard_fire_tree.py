"""The dashboard's root fire tree against a real node and worker (embedded store): every job
of a fire once, indented under its parents (a fan-in job once, naming both parents), with the
state of its execution for that fire or "not yet"; reached from the job page's runs, whose
spec lists parents and children with links; bad ids are 400 and unknown jobs 404. In
Chromium, the page renders under the CSP with no console error."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from dashboard.test_dashboard_browser import CHROMIUM, _need_browser

from integration.cluster_harness import Harness, eventually, harness_on
from schedd.dashboard._tree import fire_order
from schedd.v1 import execution_pb2, job_pb2

pytestmark = pytest.mark.timeout(60)

DONE = execution_pb2.EXECUTION_SUCCEEDED


@pytest.fixture
async def h(
    request: pytest.FixtureRequest, etcd_prefix: bytes, tmp_path: Path
) -> AsyncIterator[Harness]:
    harness = harness_on(request, "rocksdb", etcd_prefix, tmp_path)
    await harness.start_node(http_listen="127.0.0.1:0")
    try:
        yield harness
    finally:
        await harness.close()


async def _get(url: str) -> tuple[int, str, Any]:
    async with aiohttp.ClientSession() as s, s.get(url) as resp:
        return resp.status, await resp.text(), resp.headers


def _row(html: str, job_id: str) -> str:
    """The tree table's row of a job (its link names it)."""
    rows = re.findall(r"<tr>.*?</tr>", html.split('id="fire-tree"', 1)[1], re.S)
    return next(r for r in rows if f'href="/jobs/{job_id}"' in r.split("</td>", 1)[0])


def test_fire_order_puts_a_fan_in_job_once_under_its_last_parent() -> None:
    def job(i: str, after: tuple[str, ...] = (), children: tuple[str, ...] = ()) -> job_pb2.Job:
        return job_pb2.Job(id=i, name=i, after=after, children=children)

    jobs = {
        "r": job("r", children=("a", "b")),
        "a": job("a", ("r",), ("j",)),
        "b": job("b", ("r",), ("c",)),
        "c": job("c", ("b",), ("j",)),
        "j": job("j", ("a", "c")),
    }
    assert fire_order("r", jobs) == [("r", 0), ("a", 1), ("b", 1), ("c", 2), ("j", 3)]


async def test_the_tree_of_a_fire_from_the_job_page(h: Harness) -> None:
    base = h.dashboard(h.nodes[0]).url.rstrip("/")
    c = await h.connect()
    ids = {"root": (await c.create_job("root", schedule="@every 1h", handler="echo")).job.id}
    for name, after in (("f0", ["root"]), ("f1", ["root"]), ("join", ["f0", "f1"])):
        ids[name] = (await c.create_job(name, after=after, handler="echo")).job.id
    fire = (await c.trigger_job(ids["root"])).scheduled_ms
    status, html, _ = await _get(f"{base}/fires/{ids['root']}@{fire}")  # no worker yet
    assert status == 200, html
    assert "not yet" not in _row(html, ids["root"])  # waits for a worker
    assert "not yet" in _row(html, ids["join"]) and "not yet" in _row(html, ids["f0"])
    await h.start_worker()
    await eventually(
        lambda: h.runs(ids["join"]), lambda rs: [r.state for r in rs] == [DONE],
        what="the fan-in job to run", timeout=20,
    )  # fmt: skip

    status, page, _ = await _get(f"{base}/jobs/{ids['f0']}")
    assert status == 200
    assert f'href="/jobs/{ids["root"]}">root</a>' in page  # its parent, linked
    assert f'href="/jobs/{ids["join"]}">join</a>' in page  # its child, linked
    assert "runs after" in page and "Next fires" in page
    assert f'href="/fires/{ids["f0"]}%40{fire}"' in page  # its run, to the fire's tree
    status, html, headers = await _get(f"{base}/fires/{ids['f0']}%40{fire}")  # from a child
    assert status == 200 and "default-src 'self'" in headers["Content-Security-Policy"]
    assert html.count('id="fire-tree"') == 1
    for name, job_id in ids.items():
        assert "SUCCEEDED" in _row(html, job_id), name
    join_row = _row(html, ids["join"])
    assert html.count(f'href="/jobs/{ids["join"]}"') == 1  # a fan-in job once
    assert "indent-2" in join_row and ">f0</a>, <a" in join_row and ">f1</a>" in join_row
    assert "indent-1" in _row(html, ids["f1"]) and "indent-0" in _row(html, ids["root"])
    status, jobs_page, _ = await _get(f"{base}/jobs")
    assert "after <a" in jobs_page

    assert (await _get(f"{base}/fires/nope"))[0] == 400
    assert (await _get(f"{base}/fires/default:gone@{fire}"))[0] == 404
    await _in_browser(f"{base}/fires/{ids['join']}%40{fire}")


async def _in_browser(url: str) -> None:
    """The page under the CSP in Chromium: no console error, the tree's rows shown."""
    async_playwright = _need_browser()
    errors: list[str] = []
    failed: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM)
        try:
            page = await browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("requestfailed", lambda r: errors.append(r.url))
            page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
            await page.goto(url)
            assert await page.locator("#fire-tree tbody tr").count() == 4
            badge = page.locator("#fire-tree .badge").first
            assert await badge.inner_text() == "SUCCEEDED"
        finally:
            await browser.close()
    assert failed == []  # the page's own requests (a CSP refusal is a console error)
    # Chromium's own /favicon.ico request (no page links one) logs a 404: not the page's.
    assert [e for e in errors if not e.startswith("Failed to load resource")] == [], errors
