"""Who may ask, and what a request must be to be heard: the identity gate every route passes
and its modes (dev, oidc), OpenID Connect, CSRF, the Host and Origin edge checks with the headers
every response carries, and the HTTP framing rules of `python app.py`'s server."""
