"""A subset of Ganeti's RAPI version 2, served by masterd (same paths, bodies, job semantics).

Reads answer from the config; writes submit a job and answer its id, exactly as Ganeti's RAPI.
Every handler declares who may call it (`base.ROUTES`, `core.access`), and the middleware
enforces it before the handler runs. Errors are Ganeti's JSON `{"code", "message",
"explain"}`. herder-only routes live under `/2/herder/`.

- `base`: the context, errors, helpers, the route table and the middleware (no routes);
- one module per resource family, each with module-level handlers and an `add_routes()`:
  `cluster` (`/`, `/version`, `/2/features`, `/2/info`, `/2/modify`, ...), `tags`, `nodes`,
  `groups`, `instances`, `console` (the instance consoles and their streams), `jobs`,
  `query` (`/2/query/...`), `extensions` (herder's `/2/herder/jobs`, `config`,
  `maintenance`), `announce` (a node saying it is up); the web console's routes are in
  `masterd.web` (`api`, `pages`);
- `app`: the application, assembled from them (`make_app`), and the opcodes without a route
  (`NO_ROUTE`).
"""
