"""The dashboard's HTTP server: pages, a JSON feed for live runs, static files, actions.

Read-only unless started with ``actions``: then the job page has pause/resume/trigger forms
and the dead-letter page redrive forms, each with a CSRF token (:mod:`._csrf`); without it
no form is rendered and every POST answers 403. Every response forbids framing, sniffing
and any script or style not served by the node itself.

With the node's auth on, every page but the sign-in page needs an API token: signing in
checks it like an API call would and keeps it in an HttpOnly, SameSite=Strict cookie (Secure
over HTTPS). Each page then runs as that token (:func:`schedd.auth.acting_as`): a tenant's
token sees only its tenant's jobs, runs and dead letters, viewers get no action forms, and
actions go through the node's ApiGate, so they are checked, limited and audited like API calls.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from importlib import resources
from typing import TYPE_CHECKING

from aiohttp import web

from schedd._errors import InvalidArgument, NotFound, PermissionDenied, SchedError
from schedd._limits import HTTP_MAX_REQUEST_BYTES
from schedd._tls import TlsFiles
from schedd._web import bound_address, serve
from schedd.auth import ANONYMOUS, VIEWER, Caller, acting_as, current
from schedd.client import next_fires
from schedd.dashboard import _pages as pages
from schedd.dashboard._csrf import COOKIE, FIELD, check_token, new_cookie, new_secret, token_for
from schedd.dashboard._html import join, layout
from schedd.dashboard._tree import fire_body as fire_tree_body
from schedd.model import parse_execution_id, parse_state, validate_execution_id
from schedd.v1 import execution_pb2, job_pb2, scheduler_pb2

if TYPE_CHECKING:
    from schedd.node import NodeSurface

log = logging.getLogger(__name__)

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
STATIC_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
#: Most jobs the jobs page reads (then it says so).
MAX_JOBS = 5000
RECENT_RUNS = 200
#: How many next fires a job's page shows.
NEXT_FIRES = 12

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        response = exc
    for key, value in SECURITY_HEADERS.items():
        response.headers[key] = value
    if isinstance(response, web.HTTPException):
        raise response
    return response


def _static(name: str) -> bytes | None:
    if "/" in name or name.startswith("."):
        return None
    path = resources.files("schedd.dashboard").joinpath("static", name)
    return path.read_bytes() if path.is_file() else None


#: The cookie that keeps a signed-in browser's API token (auth on).
SESSION_COOKIE = "schedd_session"
#: Pages that answer without signing in.
_OPEN_PATHS = ("/login", "/static/")


def _safe_next(value: str) -> str:
    """Where to go after signing in: a path on this site only."""
    return value if value.startswith("/") and not value.startswith("//") else "/"


class DashboardServer:
    """Serves the dashboard of a node on ``listen`` (HOST:PORT; port 0: any free one): what it
    shows comes through the node's client API and gate (``node``: its surface, never the
    node itself)."""

    def __init__(
        self, node: NodeSurface, listen: str, actions: bool = False, *, tls: TlsFiles | None = None
    ) -> None:
        self.node = node
        self.listen = listen
        self.actions = actions
        self.auth = node.auth
        #: HTTPS with this certificate (the node's, when its gRPC port serves TLS); no client
        #: certificate is asked (a browser has none). None: HTTP.
        self.tls = tls
        self.port = 0
        self._secret = new_secret()
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return bound_address(self.listen, self.port)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.address}/"

    def app(self) -> web.Application:
        app = web.Application(
            middlewares=[_headers, self._signed_in], client_max_size=HTTP_MAX_REQUEST_BYTES
        )
        r = app.router
        r.add_get("/login", self._login_page)
        r.add_post("/login", self._login)
        r.add_post("/logout", self._logout)
        r.add_get("/", self._cluster)
        r.add_get("/jobs", self._jobs)
        r.add_get("/jobs/{id}", self._job)
        r.add_get("/fires/{id}", self._fire)
        r.add_get("/runs", self._runs)
        r.add_get("/api/runs", self._api_runs)
        r.add_get("/dead", self._dead)
        r.add_get("/lateness", self._lateness)
        r.add_get("/static/{name}", self._static)
        r.add_post("/actions/{action}/{target}", self._action)
        return app

    async def start(self) -> None:
        context = self.tls.server_ssl_context() if self.tls is not None else None
        self._runner, self.port = await serve(self.app(), self.listen, "dashboard", context)
        log.info("dashboard on %s (%s)", self.url, "actions on" if self.actions else "read-only")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- signing in ----------------------------------------------------------------------------

    @web.middleware
    async def _signed_in(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Runs the page as the signed-in token (auth on) or as the anonymous admin."""
        if request.method == "POST" and not self._same_origin(request):
            return self._page("Forbidden", pages.error_body("cross-site request refused"), 403)
        if not self.auth:
            return await handler(request)
        if request.path.startswith(_OPEN_PATHS):
            return await handler(request)
        try:
            caller = await self.node.gate.caller(
                request.cookies.get(SESSION_COOKIE), request.remote or ""
            )
        except SchedError as exc:
            if request.path.startswith("/api/"):
                return web.json_response({"error": str(exc)}, status=401)
            raise web.HTTPSeeOther(f"/login?next={request.path_qs}") from None
        try:
            caller.require_api()
        except PermissionDenied as exc:
            return self._page("Forbidden", pages.error_body(str(exc)), 403)
        with acting_as(caller):
            return await handler(request)

    @staticmethod
    def _same_origin(request: web.Request) -> bool:
        """A POST from a page of this site (no Origin: not a browser's cross-site form)."""
        origin = request.headers.get("Origin")
        return origin is None or origin.split("://", 1)[-1] == request.host

    async def _login_page(self, request: web.Request) -> web.Response:
        if not self.auth:
            raise web.HTTPSeeOther("/")
        nxt = _safe_next(request.query.get("next", "/"))
        return self._page("Sign in", pages.login_body(nxt, request.query.get("error", "")))

    async def _login(self, request: web.Request) -> web.Response:
        if not self.auth:
            raise web.HTTPSeeOther("/")
        form = await request.post()
        token = form.get("token")
        nxt = _safe_next(str(form.get("next", "/")))
        try:
            caller = await self.node.gate.caller(
                token if isinstance(token, str) else None, request.remote or ""
            )
            caller.require_api()
        except SchedError as exc:
            body = pages.login_body(nxt, str(exc))
            return self._page("Sign in", body, status=401)
        log.info("dashboard: token %s signed in from %s", caller.actor, request.remote)
        response = web.HTTPSeeOther(nxt)
        response.set_cookie(
            SESSION_COOKIE, str(token), httponly=True, samesite="Strict", path="/",
            secure=request.secure,
        )  # fmt: skip
        raise response

    async def _logout(self, request: web.Request) -> web.Response:
        response = web.HTTPSeeOther("/login")
        response.del_cookie(SESSION_COOKIE, path="/")
        raise response

    # -- helpers -------------------------------------------------------------------------------

    def _caller(self) -> Caller | None:
        """Who the page runs as; None on a page served before signing in."""
        if not self.auth:
            return ANONYMOUS
        try:
            return current(True)
        except SchedError:
            return None

    def _may_act(self) -> bool:
        caller = self._caller()
        return self.actions and caller is not None and caller.role != VIEWER

    def _page(self, title: str, body: object, status: int = 200) -> web.Response:
        user = ""
        caller = self._caller()
        if self.auth and caller is not None:
            user = f"{caller.actor} ({caller.role}{', ' + caller.tenant if caller.tenant else ''})"
        text = layout(title, body, node_id=self.node.node_id, actions=self._may_act(), user=user)
        return web.Response(text=text, content_type="text/html", charset="utf-8", status=status)

    def _token(self, request: web.Request) -> tuple[str | None, str | None]:
        """(form token, cookie to set) when actions are on; (None, None) otherwise."""
        if not self._may_act():
            return None, None
        cookie = request.cookies.get(COOKIE)
        fresh = None if cookie else new_cookie()
        return token_for(self._secret, cookie or fresh or ""), fresh

    def _with_cookie(self, response: web.Response, fresh: str | None) -> web.Response:
        if fresh:
            response.set_cookie(COOKIE, fresh, httponly=True, samesite="Strict", path="/")
        return response

    async def _guard(self, title: str, call: Callable[[], Awaitable[web.Response]]) -> web.Response:
        try:
            return await call()
        except NotFound as exc:
            return self._page(title, pages.error_body(str(exc)), status=404)
        except PermissionDenied as exc:
            return self._page(title, pages.error_body(str(exc)), status=403)
        except InvalidArgument as exc:
            return self._page(title, pages.error_body(str(exc)), status=400)
        except SchedError as exc:
            return self._page(title, pages.error_body(f"unavailable: {exc}"), status=503)

    async def _recent_runs(
        self, state: str = "", job_id: str = ""
    ) -> list[execution_pb2.Execution]:
        req = scheduler_pb2.ListExecutionsRequest(job_id=job_id, page_size=RECENT_RUNS)
        if state:
            req.states.append(parse_state(state, "state"))  # type: ignore[arg-type]
        resp = await self.node.api.list_executions(req)
        return list(resp.executions)

    async def _all_jobs(self) -> list[job_pb2.Job]:
        out: list[job_pb2.Job] = []
        token = ""
        while len(out) < MAX_JOBS:
            resp = await self.node.api.list_jobs(
                scheduler_pb2.ListJobsRequest(page_size=500, page_token=token)
            )
            out.extend(resp.jobs)
            token = resp.next_page_token
            if not token:
                break
        return out

    # -- pages ---------------------------------------------------------------------------------

    async def _cluster(self, request: web.Request) -> web.Response:
        async def page() -> web.Response:
            status = await self.node.api.cluster_status(scheduler_pb2.GetClusterStatusRequest())
            return self._page("Cluster", pages.cluster_body(status, self.node.health.serving))

        return await self._guard("Cluster", page)

    async def _jobs(self, request: web.Request) -> web.Response:
        query = request.query.get("q", "")[:200]
        state = request.query.get("state", "")
        if state not in pages.JOB_STATES:
            state = ""

        async def page() -> web.Response:
            every = await self._all_jobs()
            names = {j.id: j.name for j in every}
            jobs = [j for j in every if pages.matches(j, query, state)]
            jobs.sort(key=lambda j: (j.tenant, j.name, j.id))
            last: dict[str, execution_pb2.Execution] = {}
            now = self.node.clock.now_ms()
            for run in await self._recent_runs():  # newest first: the first of a job is its last
                if run.scheduled_ms <= now:  # not one claimed ahead of its instant
                    last.setdefault(run.job_id, run)
            return self._page("Jobs", pages.jobs_body(jobs, query, state, last, names))

        return await self._guard("Jobs", page)

    async def _job(self, request: web.Request) -> web.Response:
        job_id = request.match_info["id"]
        token, fresh = self._token(request)

        async def page() -> web.Response:
            job = await self.node.api.get_job(scheduler_pb2.GetJobRequest(id=job_id))
            now = self.node.clock.now_ms()
            fires = [] if job.after else [f["ms"] for f in next_fires(job, now, NEXT_FIRES)]
            runs = await self._recent_runs(job_id=job.id)
            dead = await self.node.api.list_dead_letters(
                scheduler_pb2.ListDeadLettersRequest(job_id=job.id)
            )
            related = await self._jobs_by_id([*job.after, *job.children])
            names = {i: j.name for i, j in related.items()}
            body = pages.job_body(job, fires, runs[:50], list(dead.executions), token, names)
            return self._with_cookie(self._page(f"Job {job.name or job.id}", body), fresh)

        return await self._guard("Job", page)

    async def _jobs_by_id(self, ids: list[str]) -> dict[str, job_pb2.Job]:
        """The jobs of ``ids`` the caller may see (one gone meanwhile is left out)."""
        out: dict[str, job_pb2.Job] = {}
        for job_id in dict.fromkeys(ids):
            try:
                out[job_id] = await self.node.api.get_job(scheduler_pb2.GetJobRequest(id=job_id))
            except NotFound:
                continue
        return out

    async def _fire_tree(self, job: job_pb2.Job) -> tuple[job_pb2.Job, dict[str, job_pb2.Job]]:
        """The root ``job`` descends from (through first parents) and every job of the root's
        tree by id."""
        seen = {job.id}
        while job.after and job.after[0] not in seen:
            seen.add(job.after[0])
            parent = (await self._jobs_by_id([job.after[0]])).get(job.after[0])
            if parent is None:
                break
            job = parent
        tree = {job.id: job}
        todo = [job]
        while todo and len(tree) < MAX_JOBS:
            found = await self._jobs_by_id([c for c in todo.pop().children if c not in tree])
            tree.update(found)
            todo.extend(found.values())
        return job, tree

    async def _fire(self, request: web.Request) -> web.Response:
        execution_id = request.match_info["id"]

        async def page() -> web.Response:
            job_id, fire_ms = parse_execution_id(validate_execution_id("execution", execution_id))
            start = await self.node.api.get_job(scheduler_pb2.GetJobRequest(id=job_id))
            root, tree = await self._fire_tree(start)
            req = scheduler_pb2.ListExecutionsRequest(root=f"{root.id}@{fire_ms}", page_size=1000)
            runs = (await self.node.api.list_executions(req)).executions
            body = fire_tree_body(root, fire_ms, tree, list(runs))
            return self._page(f"Fire of {root.name or root.id}", body)

        return await self._guard("Fire", page)

    def _runs_filter(self, request: web.Request) -> tuple[str, str]:
        """The runs page's state filter and search (both kept in its URL)."""
        state = request.query.get("state", "").upper()
        return (state if state in pages.RUN_STATES else ""), request.query.get("q", "")[:200]

    async def _runs(self, request: web.Request) -> web.Response:
        state, query = self._runs_filter(request)

        async def page() -> web.Response:
            runs = [r for r in await self._recent_runs(state) if pages.run_matches(r, query)]
            return self._page("Runs", pages.runs_body(runs, state, query))

        return await self._guard("Runs", page)

    async def _api_runs(self, request: web.Request) -> web.Response:
        state, query = self._runs_filter(request)
        try:
            runs = [r for r in await self._recent_runs(state) if pages.run_matches(r, query)]
        except SchedError as exc:
            return web.json_response({"error": str(exc)}, status=503)
        return web.json_response(
            {
                "headers": list(pages.RUN_HEADERS),
                "rows": [pages.run_row(r) for r in runs],
                "jobs": [[r.job_id, r.job_name] for r in runs],
            }
        )

    async def _dead(self, request: web.Request) -> web.Response:
        token, fresh = self._token(request)
        query = request.query.get("q", "")[:200]

        async def page() -> web.Response:
            resp = await self.node.api.list_dead_letters(
                scheduler_pb2.ListDeadLettersRequest(page_size=1000)
            )
            shown = [d for d in resp.executions if pages.dead_matches(d, query)]
            body = pages.dead_body(shown, token, query, len(resp.executions))
            return self._with_cookie(self._page("Dead letters", body), fresh)

        return await self._guard("Dead letters", page)

    async def _lateness(self, request: web.Request) -> web.Response:
        async def page() -> web.Response:
            body = pages.lateness_body(await self._recent_runs())
            caller = self._caller()
            if caller is not None and caller.admin:
                body = join([body, pages.metrics_body(self.node.recorder.histogram)])
            return self._page("Lateness", body)

        return await self._guard("Lateness", page)

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        data = _static(name)
        if data is None:
            raise web.HTTPNotFound()
        kind = STATIC_TYPES.get(name[name.rfind(".") :], "application/octet-stream")
        return web.Response(body=data, content_type=kind)

    # -- actions -------------------------------------------------------------------------------

    async def _action(self, request: web.Request) -> web.Response:
        if not self._may_act():
            off = pages.error_body("actions are off on this node (--http-actions)")
            return self._page("Forbidden", off, status=403)
        form = await request.post()
        token = form.get(FIELD)
        if not check_token(self._secret, request.cookies.get(COOKIE),
                           token if isinstance(token, str) else None):  # fmt: skip
            return self._page("Forbidden", pages.error_body("bad or missing CSRF token"), 403)
        action, target = request.match_info["action"], request.match_info["target"]
        api, gate = self.node.api, self.node.gate
        caller = self._caller()
        if caller is None:
            raise web.HTTPSeeOther("/login")
        if caller.peer != (request.remote or ""):
            caller = replace(caller, peer=request.remote or "")  # the audit trail's "from where"

        async def act() -> web.Response:
            # Through the gate: checked, limited and audited like the same API call.
            if action == "pause":
                req = scheduler_pb2.PauseJobRequest(id=target)
                await gate.call("PauseJob", api.pause_job, req, caller=caller)
            elif action == "resume":
                req2 = scheduler_pb2.ResumeJobRequest(id=target)
                await gate.call("ResumeJob", api.resume_job, req2, caller=caller)
            elif action == "trigger":
                req3 = scheduler_pb2.TriggerJobRequest(id=target)
                await gate.call("TriggerJob", api.trigger_job, req3, caller=caller)
            elif action == "redrive":
                req4 = scheduler_pb2.RedriveDeadLettersRequest(execution_ids=[target])
                await gate.call("RedriveDeadLetters", api.redrive, req4, caller=caller)
                raise web.HTTPSeeOther("/dead")
            else:
                raise web.HTTPNotFound()
            log.info("dashboard action %s on %s", action, target)
            raise web.HTTPSeeOther(pages.job_href(target))

        return await self._guard("Action", act)


__all__ = ["DashboardServer"]
