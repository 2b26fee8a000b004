"""The server-rendered pages (hypermedia, kept apart from the JSON API): their routes, what a
page shows of a task, the forms, the fragments every surface sends, and the one status-to-
presentation mapping."""
