# The service's image: gunicorn with gevent workers, as a non-root user, from the app's lock file
# (requirements.txt: every package pinned with its hashes). Build stage installs into a venv; the
# final stage copies only that venv and the application files, so no compiler, pip cache or build
# tool ships.
# tests/unit/test_deploy_files.py rebuilds this environment in a fresh venv from these same lines.
FROM python:3.11-slim AS build
WORKDIR /app
COPY requirements.txt .
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir --require-hashes -r requirements.txt

FROM python:3.11-slim
RUN groupadd --system --gid 10001 engine \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --shell /usr/sbin/nologin engine
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY --chown=root:root . .
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HOST=0.0.0.0 \
    PORT=8000
USER 10001
EXPOSE 8000
CMD ["gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"]
