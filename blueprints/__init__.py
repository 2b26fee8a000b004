"""HTTP surfaces: the JSON API, the pages, the streams."""
