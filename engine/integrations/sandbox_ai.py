"""The sandbox's devbox and gateway: prompt and GitHub sources on the zero-setup default, in
this process's memory (labelled "sandbox", like the sandbox cluster in sandbox.py). A repository
or prompt naming a documented marker simulates a failure (docs/configuration.md, "Sandbox")."""

import json
import re
import uuid

from engine.abort import AbortSignal
from engine.integrations.base import ExecResult, IntegrationError, NotFound

SANDBOX_EXEC_DELAY_S = 0.05
#: Files a sandbox clone "contains".
SANDBOX_REPO_FILES = ("Dockerfile", "README.md", "package.json", "src/index.js")


class SandboxDevbox:
    """In-memory devboxes: create, attach, exec (a simulated `git clone`), pause, delete.

    A repository whose name contains `sandbox-clone-error` is not found, `sandbox-clone-private`
    needs credentials, `sandbox-clone-no-ref` lacks the branch asked for.
    """

    label = "sandbox"

    def __init__(self):
        #: id -> {"workspace", "taskId", "state": "running" | "paused", "repos": {dest: url}}
        self.boxes: dict[str, dict] = {}

    def create(self, *, workspace: str, task_id: str, abort: AbortSignal) -> str:
        abort.sleep(SANDBOX_EXEC_DELAY_S)
        devbox_id = f"sbx-{uuid.uuid4().hex[:12]}"
        self.boxes[devbox_id] = {
            "workspace": workspace,
            "taskId": str(task_id),
            "state": "running",
            "repos": {},
        }
        return devbox_id

    def attach(self, devbox_id: str, *, workspace: str, abort: AbortSignal) -> None:
        self._box(devbox_id, workspace)["state"] = "running"

    def exec(
        self,
        devbox_id: str,
        command: list[str],
        *,
        workspace: str,
        abort: AbortSignal,
        timeout_s: float | None = None,
    ) -> ExecResult:
        box = self._box(devbox_id, workspace)
        if box["state"] != "running":
            raise IntegrationError(f"sandbox devbox {devbox_id} is paused")
        abort.sleep(SANDBOX_EXEC_DELAY_S)
        if command[:2] == ["git", "clone"]:
            url, dest = command[-2], command[-1]
            if "sandbox-clone-error" in url:
                return ExecResult(128, "", f"fatal: repository '{url}' not found\n")
            if "sandbox-clone-private" in url:
                return ExecResult(
                    128,
                    "",
                    "fatal: could not read Username for 'https://github.com': "
                    "terminal prompts disabled\n",
                )
            if "sandbox-clone-no-ref" in url:
                ref = command[command.index("--branch") + 1] if "--branch" in command else "main"
                return ExecResult(
                    128,
                    "",
                    f"Cloning into '{dest}'...\nfatal: Remote branch {ref} not found in "
                    "upstream origin\n",
                )
            box["repos"][dest] = url
            return ExecResult(0, "", f"Cloning into '{dest}'...\n")
        if command[:1] == ["git"] and "ls-files" in command:
            return ExecResult(0, "".join(f"{name}\n" for name in SANDBOX_REPO_FILES), "")
        return ExecResult(0, "", "")

    def pause(self, devbox_id: str, *, workspace: str, abort: AbortSignal) -> None:
        self._box(devbox_id, workspace)["state"] = "paused"

    def delete(self, devbox_id: str, *, workspace: str, abort: AbortSignal) -> None:
        self._box(devbox_id, workspace)
        del self.boxes[devbox_id]

    def _box(self, devbox_id: str, workspace: str) -> dict:
        box = self.boxes.get(devbox_id)
        if box is None or box["workspace"] != workspace:
            raise NotFound(f"sandbox devbox {devbox_id} not found")
        return box


#: Words a prompt's resource name skips.
_FILLER = {
    "a",
    "an",
    "the",
    "deploy",
    "please",
    "me",
    "my",
    "with",
    "for",
    "and",
    "to",
    "of",
    "on",
    "in",
    "app",
    "application",
    "service",
    "run",
    "create",
    "set",
    "up",
    "some",
}


class SandboxGateway:
    """A deterministic stand-in for the model: an nginx-like Deployment (+ Service) named from
    the prompt or repository, labelled as a sandbox plan, streamed in small chunks.

    A task text containing `sandbox-needs-input` first asks for a sensitive ADMIN_PASSWORD,
    then references it as ${input:ADMIN_PASSWORD} in a Secret.
    """

    label = "sandbox"
    CHUNK_CHARS = 16

    def __init__(self, chunk_delay_s: float = 0.02):
        self.chunk_delay_s = chunk_delay_s

    def stream_chat(self, messages: list[dict], *, session_id: str, abort: AbortSignal):
        text = self.answer(messages)
        for start in range(0, len(text), self.CHUNK_CHARS):
            abort.sleep(self.chunk_delay_s)
            yield text[start : start + self.CHUNK_CHARS]

    def answer(self, messages: list[dict]) -> str:
        """The whole answer the sandbox gives to this conversation."""
        task = next((m["content"] for m in messages if m.get("role") == "user"), "")
        follow_up = any(m.get("role") == "assistant" for m in messages)
        if "sandbox-needs-input" in task and not follow_up:
            body = {
                "needInputs": [
                    {
                        "name": "ADMIN_PASSWORD",
                        "type": "password",
                        "sensitive": True,
                        "required": True,
                        "description": "admin password for the sandbox app",
                    }
                ]
            }
            return "I need one input first:\n```json\n" + json.dumps(body, indent=1) + "\n```\n"
        name = _name_for(task)
        labels = {"app.kubernetes.io/name": name, "deploy.sandbox/generated": "true"}
        container = {"name": name, "image": "nginx:1.27", "ports": [{"containerPort": 80}]}
        manifests = []
        args = {"name": name, "image": "nginx:1.27", "replicas": 1}
        if "sandbox-needs-input" in task:
            args["ADMIN_PASSWORD"] = "${input:ADMIN_PASSWORD}"
            manifests.append(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": f"{name}-admin", "labels": labels},
                    "type": "Opaque",
                    "stringData": {"ADMIN_PASSWORD": "${input:ADMIN_PASSWORD}"},
                }
            )
            container["env"] = [
                {
                    "name": "ADMIN_PASSWORD",
                    "valueFrom": {
                        "secretKeyRef": {"name": f"{name}-admin", "key": "ADMIN_PASSWORD"}
                    },
                }
            ]
        manifests += [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [container]},
                    },
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "selector": {"app.kubernetes.io/name": name},
                    "ports": [{"port": 80, "targetPort": 80}],
                },
            },
        ]
        body = {
            "plan": {
                "summary": f"sandbox plan: an nginx-like Deployment '{name}' and its Service",
                "generator": "sandbox",
                "args": args,
            },
            "manifests": manifests,
        }
        return "Here is the plan:\n```json\n" + json.dumps(body, indent=1) + "\n```\n"


def _name_for(task: str) -> str:
    """A DNS-1123 name from the task's prompt or repository line."""
    repo = re.search(r"^Repository: [^/\s]+/(\S+)", task, re.MULTILINE)
    prompt = re.search(r"^Prompt: (.*)$", task, re.MULTILINE)
    text = repo.group(1) if repo else prompt.group(1) if prompt else task
    words = [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _FILLER]
    name = "-".join(words[:3])[:40].strip("-")
    return name or "sandbox-app"
