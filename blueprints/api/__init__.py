"""The JSON API at /api/v1: its routes (routes.py), what they share with the chat tools
(calls.py), the tools over REST and their catalog (tool_*), and the OpenAPI document of it all
(openapi_*)."""
