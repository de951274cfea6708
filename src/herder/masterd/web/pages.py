"""The web console's own routes under `/ui/` (everything else it shows comes from RAPI):

- `GET /ui/`: the console (one page; its views are `#/...` fragments), only with a live
  session, else a redirect to the login page;
- `GET|POST /ui/login`: the login form; a RAPI user's name and password open a session
  (cookie `herder_session`: HttpOnly, Secure, SameSite=Strict, Path=/);
- `POST /ui/logout`: ends the session (its CSRF token in the form or the header);
- `GET /ui/session`: who is logged in, whether they may act, and the CSRF token;
- `GET /ui/static/PATH`: the console's files, shipped in the package (no CDN).

These routes are open to anyone (`access.ANYONE`; login and logout: `access.WEB_LOGIN`): each
checks the session itself, and only the login page and the static files (no cluster data)
answer without one.
"""

from __future__ import annotations

import html
import mimetypes
from pathlib import Path

from aiohttp import web

from herder.core import access, login_backoff
from herder.masterd.rapi.base import ROUTES, RapiHttpError, ctx_of, error_response, ok, takes
from herder.masterd.web import auth
from herder.masterd.web.sessions import COOKIE, CSRF_HEADER, csrf_matches

STATIC = Path(__file__).resolve().parent / "static"
MAX_FORM = 16 * 1024  # bytes of a login form
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make form posts say Origin: null
    "Cache-Control": "no-store",
}
WHY = {"ended": "Your session has ended; log in again.",
       "out": "You have logged out."}


def _page(name: str, status: int = 200, **values: str) -> web.Response:
    text = (STATIC / name).read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", html.escape(value))
    return web.Response(text=text, status=status, content_type="text/html",
                        headers=SECURITY_HEADERS)


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location, **SECURITY_HEADERS})


def _session_of(request: web.Request) -> auth.SessionCaller:
    ctx = ctx_of(request)
    return auth.session_caller(request, ctx.users,
                               None if ctx.web is None else ctx.web.sessions)


@ROUTES.allow(access.ANYONE)
async def ui_redirect(request: web.Request) -> web.Response:
    return _see_other("/ui/")


@ROUTES.allow(access.ANYONE)
async def console(request: web.Request) -> web.Response:
    caller = _session_of(request)
    if caller.session is None:
        return _see_other("/ui/login" + ("?why=ended" if caller.problem else ""))
    return _page("index.html")


@ROUTES.allow(access.ANYONE)
@takes("why")
async def login_form(request: web.Request) -> web.Response:
    return _page("login.html", message=WHY.get(request.query.get("why", ""), ""))


@ROUTES.allow(access.WEB_LOGIN)
@takes(body=True)
async def login(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    if ctx.web is None:
        raise RapiHttpError(404, "this server has no web console")
    if not auth.same_origin(request):  # no login forced on a browser by a foreign page
        return _page("login.html", 403, message="A login from another site is refused.")
    if (request.content_length or 0) > MAX_FORM:
        return _page("login.html", 413, message="The form is too large.")
    form = await request.post()
    name, password = str(form.get("user", "")), str(form.get("password", ""))
    tried = login_backoff.attempt(ctx.users, ctx.backoff, name, password,
                                  request.remote or "?", "web console login")
    if tried.hold > 0:
        page = _page("login.html", 429, message="Too many wrong passwords from this address; "
                                                f"try again in {tried.hold:.0f} s.")
        page.headers["Retry-After"] = login_backoff.retry_after(tried.hold)
        return page
    user = tried.user
    if user is None:
        return _page("login.html", 401, message="Unknown user or wrong password.")
    session = ctx.web.sessions.create(user.name)
    response = _see_other("/ui/")
    response.set_cookie(COOKIE, session.id, httponly=True, secure=True, samesite="Strict",
                        path="/", max_age=int(ctx.web.sessions.lifetime))
    return response


@ROUTES.allow(access.WEB_LOGIN)
@takes(body=True)
async def logout(request: web.Request) -> web.Response:
    caller = _session_of(request)
    if caller.session is not None:
        form = await request.post() if request.content_type.endswith("form-urlencoded") else {}
        token = request.headers.get(CSRF_HEADER) or str(form.get("csrf", ""))
        if not csrf_matches(caller.session, token):
            return _page("login.html", 403, message="Logout refused: the form carries no "
                                                     "valid CSRF token.")
        ctx = ctx_of(request)
        assert ctx.web is not None  # a session exists only with a web console
        ctx.web.sessions.drop(caller.session.id)
    response = _see_other("/ui/login?why=out")
    response.del_cookie(COOKIE, path="/")
    return response


@ROUTES.allow(access.ANYONE)
async def whoami(request: web.Request) -> web.Response:
    caller = _session_of(request)
    if caller.session is None or caller.user is None:
        return error_response(401, caller.problem or "not logged in")
    return ok({"user": caller.user.name, "write": caller.user.can_write,
               "csrf": caller.session.csrf})


@ROUTES.allow(access.ANYONE)
async def static(request: web.Request) -> web.Response:
    relative = request.match_info["path"]
    path = (STATIC / relative).resolve()
    if not path.is_relative_to(STATIC) or not path.is_file():
        raise RapiHttpError(404, f"no such file: {relative}")
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if path.suffix == ".js":
        kind = "text/javascript"
    return web.Response(body=path.read_bytes(), content_type=kind,
                        headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/ui", ui_redirect)
    router.add_get("/ui/", console)
    router.add_get("/ui/login", login_form)
    router.add_post("/ui/login", login)
    router.add_post("/ui/logout", logout)
    router.add_get("/ui/session", whoami)
    router.add_get("/ui/static/{path:.+}", static)
