"""HTTP surfaces, grouped by surface; the few modules every surface shares sit here at the top.

- api/      the JSON API at /api/v1: its routes, the chat tools over REST and their catalog, and
            the OpenAPI document of all of it (with its docs page)
- mcp/      the chat tools over the Model Context Protocol at /mcp
- pages/    the server-rendered pages: routes, views of a task, forms, fragments, presentation
- streams/  the live streams: SSE of a project and of gateway turns, the timeline websocket
- auth/     who may ask and what a request must be: the identity gate and its modes, OIDC, CSRF,
            the Host/Origin edge checks and the dev server's HTTP framing
- ops.py    probes, metrics, the operators' streaks API and Health page
- errors.py, request_helpers.py, schemas.py: the errors and their HTTP statuses, the request
  helpers (runtime, validated bodies, the kubeconfig header), the request schemas

A surface leans only on those below it (tests/unit/test_invariants.py): the shared modules, then
auth, then api, pages and ops, then mcp and streams. A route module never imports another's
helpers.
"""
