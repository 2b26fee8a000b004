"""The chat tools over the Model Context Protocol at /mcp, the same tools as the JSON API's
(blueprints/api/tool_catalog.py)."""
