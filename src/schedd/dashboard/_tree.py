"""The dashboard's view of jobs that run after jobs: one root fire's tree of executions, and
a job's parents and children (pure functions, from the API's messages)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import quote

from schedd.dashboard._html import Markup, counted, esc, fmt_ms, join, link, table, tag
from schedd.model import state_name
from schedd.v1 import execution_pb2, job_pb2

#: Deeper jobs are indented as this deep (the stylesheet has a class per level up to it).
MAX_INDENT = 8


def fire_href(execution_id: str) -> str:
    """The tree page of the root fire an execution (``JOB@MILLIS``) belongs to."""
    return "/fires/" + quote(execution_id, safe="")


def _job_link(job_id: str, names: Mapping[str, str]) -> Markup:
    name = names.get(job_id, "")
    if not name:
        return tag("span", f"{job_id} (deleted)", class_="gone")
    return link("/jobs/" + quote(job_id, safe=""), name)


def jobs_links(ids: Sequence[str], names: Mapping[str, str]) -> Markup | str:
    """Jobs by name, each linked to its page (``-`` for none)."""
    if not ids:
        return "-"
    return join(join([", " if n else "", _job_link(j, names)]) for n, j in enumerate(ids))


def fire_order(root: str, jobs: Mapping[str, job_pb2.Job]) -> list[tuple[str, int]]:
    """The jobs of a root's tree (``jobs``: the root and its descendants by id), each once
    with its depth: a job comes after every parent it has in the tree, under the last of them
    (a fan-in job once, as deep as its deepest parent plus one); children by name."""
    out: list[tuple[str, int]] = []
    depth: dict[str, int] = {}

    def visit(job_id: str, level: int) -> None:
        depth[job_id] = level
        out.append((job_id, level))
        kids = [c for c in jobs[job_id].children if c in jobs and c not in depth]
        for child in sorted(kids, key=lambda c: (jobs[c].name, c)):
            parents = [p for p in jobs[child].after if p in jobs]
            if child not in depth and all(p in depth for p in parents):
                visit(child, 1 + max(depth[p] for p in parents))

    if root in jobs:
        visit(root, 0)
    return out


def fire_body(
    root: job_pb2.Job,
    fire_ms: int,
    jobs: Mapping[str, job_pb2.Job],
    runs: Sequence[execution_pb2.Execution],
) -> Markup:
    """One fire of ``root``: each job of its tree, indented under its parents, with the state
    of its execution for the fire (``not yet`` when it has none yet) and why."""
    names = {j.id: j.name for j in jobs.values()}
    by_job = {r.job_id: r for r in runs if r.scheduled_ms == fire_ms}
    rows = []
    for job_id, level in fire_order(root.id, jobs):
        job, run = jobs[job_id], by_job.get(job_id)
        name = tag("span", _job_link(job_id, names), class_=f"indent-{min(level, MAX_INDENT)}")
        state = (
            tag("span", state_name(run.state), class_=f"badge st-{state_name(run.state)}")
            if run is not None
            else tag("span", "not yet", class_="badge st-not-yet")
        )
        note = (run.error or run.reason)[:200] if run is not None else ""
        rows.append((name, jobs_links(list(job.after), names), state,
                     run.id if run is not None else "-", note))  # fmt: skip
    done = sum(1 for r in by_job.values() if r.job_id in jobs)
    head = tag(
        "p",
        join(["fire ", tag("code", str(fire_ms)), f" ({fmt_ms(fire_ms)} UTC) of root ",
              _job_link(root.id, names), f": {counted(len(rows), 'job')}, {done} with an "
              "execution for it"]),
        id="fire-summary",
    )  # fmt: skip
    tbl = table(("JOB", "AFTER", "STATE", "EXECUTION", "ERROR/REASON"), rows, id_="fire-tree")
    return join([head, tbl])


def deps_rows(job: job_pb2.Job, names: Mapping[str, str]) -> list[tuple[str, object]]:
    """A job page's rows for its parents and children, linked (none for a job without)."""
    if not job.after and not job.children:
        return []
    return [("after", jobs_links(list(job.after), names)),
            ("children", jobs_links(list(job.children), names))]  # fmt: skip


def runs_after_note(job: job_pb2.Job, names: Mapping[str, str]) -> Markup:
    """What a job with parents shows instead of its next fires."""
    return tag(
        "p",
        join(["runs after ", jobs_links(list(job.after), names), ": once per fire of its root, "
              "when every one of them has succeeded (no schedule of its own)"]),
        id="runs-after",
    )  # fmt: skip


__all__ = ["deps_rows", "esc", "fire_body", "fire_href", "fire_order", "runs_after_note"]
