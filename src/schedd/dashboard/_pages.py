"""The dashboard's pages as HTML bodies, from the API's messages (pure functions)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from schedd.client import dst_notes, execution_note, job_state_word, lateness_ms
from schedd.dashboard._csrf import FIELD
from schedd.dashboard._html import (
    Markup,
    counted,
    esc,
    fmt_ms,
    join,
    lateness_svg,
    link,
    table,
    tag,
)
from schedd.dashboard._tree import deps_rows, fire_href, jobs_links, runs_after_note
from schedd.model import state_name
from schedd.schedule import describe_schedule
from schedd.v1 import execution_pb2, job_pb2, scheduler_pb2

#: The states the runs page filters by.
RUN_STATES = (
    "PENDING", "DISPATCHED", "RUNNING", "SUCCEEDED", "FAILED", "RETRY_WAIT", "DEAD", "MISSED",
    "SKIPPED", "CANCELLED",
)  # fmt: skip


#: The states the jobs page filters by (what :func:`job_state_word` says).
JOB_STATES = ("active", "paused", "completed")


def job_href(job_id: str) -> str:
    return "/jobs/" + quote(job_id, safe="")


def _error(ex: execution_pb2.Execution) -> str:
    """Its error, else its reason, else why it waits for a worker."""
    return execution_note(ex)[:200]


def cluster_body(status: scheduler_pb2.ClusterStatus, etcd_ok: bool) -> Markup:
    """Nodes (clock skew, partitions owned), partitions (owner, epoch), workers (load), etcd."""
    etcd = tag("span", "reachable" if etcd_ok else "UNREACHABLE", class_="ok" if etcd_ok else "bad")
    nodes = table(
        ("NODE", "ADDRESS", "VERSION", "STARTED (UTC)", "PARTITIONS", "CLOCK SKEW", "ELIGIBLE"),
        (
            (
                n.node_id, n.address, n.version, fmt_ms(n.started_ms), n.partitions_owned,
                f"{n.clock_skew_ms} ms" if n.reported and n.clock_skew_known else "-",
                ("yes" if n.eligible else f"no: {n.ineligible_reason}") if n.reported else "-",
            )
            for n in status.nodes
        ),
        id_="nodes",
    )  # fmt: skip
    parts = table(
        ("PARTITION", "OWNER", "EPOCH"),
        ((p.partition, p.owner or "(none)", p.epoch) for p in status.partitions),
        id_="partitions",
    )
    workers = table(
        ("WORKER", "NODES", "QUEUES", "HANDLERS", "IN FLIGHT / CAPACITY", "HELD", "CONNECTED"),
        (
            (
                w.worker_id, ", ".join(w.node_ids) or w.node_id, ", ".join(w.queues),
                ", ".join(w.handlers), f"{w.in_flight} / {w.capacity}", w.held,
                fmt_ms(w.connected_ms),
            )
            for w in status.workers
        ),
        id_="workers",
    )  # fmt: skip
    missing = (
        tag("p", "not answering: " + ", ".join(f"{m.node_id} ({m.reason})" for m in
            status.missing_nodes), class_="bad")
        if status.missing_nodes else ""
    )  # fmt: skip
    return join(
        [
            tag("p", join(["cluster ", tag("code", status.cluster_id), ", etcd ", etcd,
                           f", {status.partition_count} partitions"])),
            missing,
            tag("h2", "Nodes"), nodes,
            tag("h2", "Workers"), workers if status.workers else tag("p", "no workers connected"),
            tag("h2", "Partitions"), parts,
        ]
    )  # fmt: skip


def state_badge(state: str, id_: str | None = None) -> Markup:
    """A state as a coloured badge (``badge st-SUCCEEDED``, ``badge st-paused`` ...)."""
    return tag("span", state, class_=f"badge st-{state}", id=id_)


def _last_run(job: job_pb2.Job, last: execution_pb2.Execution | None) -> Markup | str:
    """When it last fired, in its zone, with the outcome of its latest run when known."""
    zone = job.schedule.timezone or "UTC"
    if last is None:
        return fmt_ms(job.last_fire_ms, zone) if job.last_fire_ms else "-"
    return join([fmt_ms(last.scheduled_ms, zone), " ", state_badge(state_name(last.state))])


def jobs_body(
    jobs: Sequence[job_pb2.Job],
    query: str,
    state: str,
    last_runs: dict[str, execution_pb2.Execution] | None = None,
    names: Mapping[str, str] | None = None,
) -> Markup:
    """The search form and the jobs matching it: name, schedule in words (the expression on
    hover), next and last run in the job's zone (the last with its outcome), state."""
    last_runs = last_runs or {}
    options = join(
        tag("option", label, value=value, selected="selected" if value == state else None)
        for value, label in (("", "any state"), *((s, s) for s in JOB_STATES))
    )
    form = tag(
        "form",
        join([
            tag("input", name="q", value=query, placeholder="name, id, tenant or label",
                type="search", id="q"),
            tag("select", options, name="state", id="state"),
            tag("button", "Filter", type="submit"),
        ]),
        method="get", action="/jobs", class_="filter",
    )  # fmt: skip
    rows = []
    names = {**{j.id: j.name for j in jobs}, **(names or {})}  # every job's, for parents
    for j in jobs:
        zone = j.schedule.timezone or "UTC"
        words = (
            _schedule_cell(j, names)
            if j.after
            else tag("span", describe_schedule(j.schedule.expr, zone), title=j.schedule.expr)
        )
        rows.append(
            (
                link(job_href(j.id), j.name or j.id), words,
                "-" if j.paused or not j.next_fire_ms else fmt_ms(j.next_fire_ms, zone),
                _last_run(j, last_runs.get(j.id)), state_badge(job_state_word(j)), j.tenant,
                tag("span", j.id, class_="id"),
            )
        )  # fmt: skip
    body = (
        table(("NAME", "SCHEDULE", "NEXT RUN (JOB ZONE)", "LAST RUN", "STATE", "TENANT", "ID"),
              rows, id_="jobs")
        if rows else tag("p", "no jobs match", class_="empty")
    )  # fmt: skip
    return join([form, tag("p", counted(len(rows), "job")), body])


def matches(job: job_pb2.Job, query: str, state: str) -> bool:
    """Whether a job matches the jobs page's search (case-insensitive substring of its name,
    id, tenant, handler or a label) and state filter."""
    if state and job_state_word(job) != state:
        return False
    if not query:
        return True
    q = query.lower()
    hay = [job.name, job.id, job.tenant, job.handler.name, job.schedule.expr]
    hay += [f"{k}={v}" for k, v in job.labels.items()]
    return any(q in h.lower() for h in hay)


def action_form(action: str, target: str, token: str, label: str, confirm: str) -> Markup:
    """A POST form with the CSRF token; dash.js asks ``confirm`` before it submits."""
    return tag(
        "form",
        join([
            tag("input", type="hidden", name=FIELD, value=token),
            tag("button", label, type="submit", class_="action", id=f"{action}-button"),
        ]),
        method="post", action=f"/actions/{action}/{quote(target, safe='')}",
        class_="action-form", data_confirm=confirm,
    )  # fmt: skip


def _schedule_cell(job: job_pb2.Job, names: Mapping[str, str]) -> Markup:
    """Its schedule (the expression and in words), or the jobs it runs after."""
    if job.after:
        return join(["after ", jobs_links(list(job.after), names)])
    zone = job.schedule.timezone or "UTC"
    return join([job.schedule.expr, " (", describe_schedule(job.schedule.expr, zone), ")"])


def job_body(
    job: job_pb2.Job,
    fires_ms: Sequence[int],
    runs: Sequence[execution_pb2.Execution],
    dead: Sequence[execution_pb2.Execution],
    token: str | None,
    names: Mapping[str, str] | None = None,
) -> Markup:
    """A job: its spec (with its parents and children, linked: ``names`` id -> name), next
    fires with DST notes, recent runs with lateness and errors (each linked to its fire's tree
    when the job has parents or children)."""
    zone = job.schedule.timezone or "UTC"
    names = {job.id: job.name, **(names or {})}
    kind = job.WhichOneof("target") or "-"
    target = job.handler.name if kind == "handler" else job.http.url if kind == "http" else kind
    spec = table(
        ("FIELD", "VALUE"),
        [
            ("id", job.id), ("name", job.name), ("tenant", job.tenant),
            ("schedule", _schedule_cell(job, names)), *deps_rows(job, names),
            ("zone", zone), (kind, target),
            ("state", state_badge(job_state_word(job), id_="job-state")),
            ("max attempts", job.retry.max_attempts), ("partition", job.partition),
            ("version", job.version), ("last fire", fmt_ms(job.last_fire_ms, zone)),
            ("labels", ", ".join(f"{k}={v}" for k, v in sorted(job.labels.items())) or "-"),
        ],
        id_="spec",
    )  # fmt: skip
    actions: Any = ""
    if token is not None:
        pause: Any = ""  # a job with no fire left (a one-shot that fired) has nothing to pause
        if job.paused:
            pause = action_form("resume", job.id, token, "Resume", f"Resume job {job.name}?")
        elif job.next_fire_ms:
            pause = action_form("pause", job.id, token, "Pause", f"Pause job {job.name}?")
        trigger = action_form("trigger", job.id, token, "Trigger now", f"Run job {job.name} now?")
        actions = tag("div", join([pause, trigger]), class_="actions")
    notes = dst_notes(fires_ms, zone)
    fires = (
        table(("UTC", f"LOCAL ({zone})", "NOTE"),
              ((fmt_ms(ms), fmt_ms(ms, zone), note)
               for ms, note in zip(fires_ms, notes, strict=True)),
              id_="fires")
        if fires_ms else runs_after_note(job, names) if job.after else
        tag("p", "paused: no fires until it is resumed" if job.paused else "no more fires")
    )  # fmt: skip
    run_rows = _job_run_rows(job, runs, zone)
    dead_rows = [(d.id, d.attempt, _error(d)) for d in dead]
    return join([
        actions, spec,
        tag("h2", "Next fires"), fires,
        tag("h2", "Recent runs"), run_timeline(runs, zone),
        tag("p", tag("a", "all its runs", href="/runs?" + urlencode({"q": job.id}), id="all-runs")),
        table(("SCHEDULED MS", f"SCHEDULED ({zone})", "STATE", "ATTEMPT", "LATENESS", "ERROR"),
              run_rows, id_="job-runs") if run_rows else tag("p", "no runs yet"),
        tag("h2", "Dead letters"),
        table(("EXECUTION", "ATTEMPTS", "ERROR"), dead_rows, id_="job-dead") if dead_rows
        else tag("p", "no dead letters"),
    ])  # fmt: skip


def _job_run_rows(
    job: job_pb2.Job, runs: Sequence[execution_pb2.Execution], zone: str
) -> list[tuple[object, ...]]:
    """A job page's runs, each linked to its fire's tree when the job has parents or
    children."""
    in_tree = bool(job.after or job.children)
    return [
        (link(fire_href(r.id), r.id.rpartition("@")[2]) if in_tree else r.id.rpartition("@")[2],
         fmt_ms(r.scheduled_ms, zone), state_name(r.state), r.attempt,
         "-" if (late := lateness_ms(r)) is None else f"{late} ms", _error(r))
        for r in runs
    ]  # fmt: skip


def run_timeline(runs: Sequence[execution_pb2.Execution], zone: str) -> Markup:
    """A strip of the job's recent runs, oldest first, one mark each coloured by its state
    (its time and state on hover): what went wrong, and when, at a glance."""
    if not runs:
        return Markup("")
    marks = [
        tag("span", "", class_=f"mark st-{state_name(r.state)}",
            title=f"{fmt_ms(r.scheduled_ms, zone)}: {state_name(r.state)}")
        for r in sorted(runs, key=lambda r: r.scheduled_ms)
    ]  # fmt: skip
    return tag("div", join(marks), class_="timeline", id="job-timeline")


def job_cell(job_id: str, name: str) -> Markup:
    """A run's job: its name, linked to its page; a deleted job's id, not linked (no 404)."""
    if not name:
        return tag("span", f"{job_id} (deleted)", class_="gone")
    return link(job_href(job_id), name)


def run_row(r: execution_pb2.Execution) -> list[str]:
    """A runs-table row (the same cells the JSON endpoint gives the live update; the job
    cell's id and name go beside them, see :func:`job_cell`)."""
    late = lateness_ms(r)
    return [
        r.id,
        r.job_name or r.job_id,
        fmt_ms(r.scheduled_ms),
        state_name(r.state),
        str(r.attempt),
        r.worker_id or "-",
        "-" if late is None else f"{late} ms",
        _error(r),
    ]


RUN_HEADERS = ("EXECUTION", "JOB", "SCHEDULED (UTC)", "STATE", "ATTEMPT", "WORKER", "LATENESS",
               "ERROR")  # fmt: skip


def run_matches(r: execution_pb2.Execution, query: str) -> bool:
    """Whether a run matches the runs page's search: a case-insensitive substring of its
    job's name or id, its execution id, its worker or its error, reason or waiting note."""
    if not query:
        return True
    q = query.lower()
    return any(q in h.lower() for h in (r.job_name, r.job_id, r.id, r.worker_id, _error(r)))


def runs_body(runs: Sequence[execution_pb2.Execution], state: str, query: str = "") -> Markup:
    """Recent runs, filtered by state and a search; dash.js polls /api/runs with the same
    filters and re-renders the table."""
    options = join(
        tag("option", s or "any state", value=s, selected="selected" if s == state else None)
        for s in ("", *RUN_STATES)
    )
    form = tag(
        "form",
        join([tag("input", name="q", value=query, placeholder="job, execution, worker or error",
                  type="search", id="q"),
              tag("select", options, name="state", id="state"),
              tag("button", "Filter", type="submit")]),
        method="get", action="/runs", class_="filter",
    )  # fmt: skip
    params = urlencode([(k, v) for k, v in (("state", state), ("q", query)) if v])
    src = "/api/runs" + (f"?{params}" if params else "")
    live = tag("p", f"{counted(len(runs), 'run')}, updating every 2 s", id="live-status")
    rows = (
        [(c := run_row(r))[0], job_cell(r.job_id, r.job_name), c[2], state_badge(c[3]), *c[4:]]
        for r in runs
    )
    tbl = table(RUN_HEADERS, rows, id_="runs")
    return join([form, live, tag("div", tbl, id="runs-live", data_src=src)])


def dead_matches(d: execution_pb2.Execution, query: str) -> bool:
    """Whether a dead letter matches the dead-letter page's search: what the runs page's
    search looks at, and its tenant."""
    return run_matches(d, query) or (bool(query) and query.lower() in d.tenant.lower())


def dead_body(
    dead: Sequence[execution_pb2.Execution], token: str | None, query: str = "", total: int = 0
) -> Markup:
    """The dead letters matching a search (kept in the URL), with a redrive button each when
    actions are on; ``total`` counts them all, before the search."""
    form = tag(
        "form",
        join([tag("input", name="q", value=query, type="search", id="q",
                  placeholder="job, execution, tenant or error"),
              tag("button", "Filter", type="submit")]),
        method="get", action="/dead", class_="filter",
    )  # fmt: skip
    n = len(dead)
    count = counted(total, "dead letter")
    if query:
        count = f"{counted(n, 'dead letter')} {'matches' if n == 1 else 'match'} (of {total})"
    if not dead:
        empty = "no dead letters match" if query else "no dead letters"
        return join([form, tag("p", empty, class_="empty")])
    rows = []
    for d in dead:
        row: list[object] = [d.id, job_cell(d.job_id, d.job_name), d.tenant,
                             fmt_ms(d.scheduled_ms), d.attempt, _error(d)]  # fmt: skip
        if token is not None:
            row.append(action_form("redrive", d.id, token, "Redrive", f"Redrive {d.id}?"))
        rows.append(row)
    headers = ("EXECUTION", "JOB", "TENANT", "SCHEDULED (UTC)", "ATTEMPTS", "ERROR")
    tbl = table(headers + (("ACTION",) if token is not None else ()), rows, id_="dead")
    return join([form, tag("p", count, id="dead-count"), tbl])


def lateness_body(runs: Sequence[execution_pb2.Execution]) -> Markup:
    """A chart of recent started runs' lateness (start minus due), with percentiles."""
    started = sorted((r for r in runs if lateness_ms(r) is not None), key=lambda r: r.due_ms)
    points = [(f"{r.id} ({fmt_ms(r.scheduled_ms)})", lateness_ms(r) or 0) for r in started]
    values = sorted(v for _, v in points)

    def pct(p: float) -> str:
        return f"{values[min(int(p * len(values)), len(values) - 1)]} ms" if values else "-"

    summary = table(
        ("RUNS", "P50", "P95", "P99", "MAX"),
        [(len(values), pct(0.5), pct(0.95), pct(0.99), f"{values[-1]} ms" if values else "-")],
        id_="lateness-summary",
    )
    return join([
        tag("p", "Lateness: how long after its due instant each run started (the scheduler's "
                 "delay plus any tenant throttling)."),
        summary, lateness_svg(points),
    ])  # fmt: skip


#: The node's histograms the lateness page shows when metrics are on (name, what it measures).
HISTOGRAMS = (
    ("schedd_fire_delay_seconds", "fire delay: due instant to the node handing the run out"),
    ("schedd_start_lateness_seconds", "start lateness: due instant to the handler starting"),
)


def _bound(le: float) -> str:
    return "+Inf" if le == float("inf") else f"{le:g}"


def metrics_body(histogram: Callable[[str], list[tuple[float, int]]]) -> Markup:
    """The node's lateness histograms since it started (metrics on), one table and chart each
    (``histogram``: the node's recorder's, per-bucket counts; [] for one it does not keep)."""
    parts: list[object] = []
    for name, what in HISTOGRAMS:
        buckets = [(_bound(le), n) for le, n in histogram(name)]
        if not buckets:
            continue  # not in this process (the node's or a worker's)
        if not any(n for _, n in buckets):
            parts.append(tag("p", f"{name} ({what}): no observations yet", class_="empty"))
            continue
        parts += [
            tag("h2", f"{name}: {what}"),
            table(("≤ SECONDS", "RUNS"), buckets, id_=name),
            lateness_svg([(f"≤ {le} s", n) for le, n in buckets], unit="runs"),
        ]
    if not parts:
        return Markup("")
    why = tag(
        "p",
        "These count every run this node handed out since it started, bucketed; "
        "the chart above shows only the recent runs listed cluster-wide, each by its "
        "own lateness. Runs a worker held ahead of their instant and started on its "
        "own timer are handed out before they are due (no fire delay), so the two "
        "views can disagree without either being wrong.",
        class_="empty",
    )
    return join([tag("h2", "Since the node started (its metrics)", id="metrics"), why, *parts])


def login_body(next_path: str, error: str = "") -> Markup:
    """The sign-in form: an API token (a password field, never echoed back)."""
    parts = [tag("p", error, class_="bad")] if error else []
    parts.append(Markup(
        '<form method="post" action="/login" class="login">'
        '<label>API token <input type="password" name="token" autocomplete="off" required '
        'placeholder="sdt_..."></label>'
        f'<input type="hidden" name="next" value="{esc(next_path)}">'
        '<button type="submit">Sign in</button></form>'
        "<p>Make one with <code>schedctl token create</code>; a tenant's token shows that "
        "tenant only.</p>"
    ))  # fmt: skip
    return join(parts)


def error_body(message: str) -> Markup:
    return tag("p", message, class_="bad")


__all__ = ["esc"]
