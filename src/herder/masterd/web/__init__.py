"""masterd's web console at `/ui/` (issue 20): login sessions (`sessions`), the pages' JSON
twins in RAPI (`api`), an hour of live samples per node (`samples`), the overview and its
alerts (`overview`, pure), the login/logout pages and static assets (`pages`, `static/`).

The console holds no logic of its own: every page reads RAPI routes and every action is an
ordinary RAPI job, sent by the browser with its session cookie and CSRF token.
"""
