"""Read the Dockerfile and .dockerignore as Docker would, so tests replay the image's own
commands instead of restating them (the Docker daemon may not run containers on test machines)."""

import json
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Stage:
    base: str
    name: str | None = None
    workdir: str = "/"
    user: str | None = None
    cmd: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    #: (from stage or None for the build context, sources, destination)
    copies: list[tuple[str | None, list[str], str]] = field(default_factory=list)


@dataclass
class Dockerfile:
    stages: list[Stage]

    @classmethod
    def read(cls, path: Path) -> "Dockerfile":
        stages: list[Stage] = []
        for instruction, args in _instructions(path.read_text()):
            if instruction == "FROM":
                words = args.split()
                stages.append(Stage(base=words[0], name=words[2] if len(words) > 2 else None))
                continue
            stage = stages[-1]
            if instruction == "WORKDIR":
                stage.workdir = args
            elif instruction == "USER":
                stage.user = args
            elif instruction == "RUN":
                stage.runs.append(args)
            elif instruction == "CMD":
                stage.cmd = json.loads(args)
            elif instruction == "ENV":
                for word in shlex.split(args):
                    key, _, value = word.partition("=")
                    stage.env[key] = value
            elif instruction == "COPY":
                words = shlex.split(args)
                options = [w for w in words if w.startswith("--")]
                paths = [w for w in words if not w.startswith("--")]
                origin = next(
                    (o.split("=", 1)[1] for o in options if o.startswith("--from=")), None
                )
                stage.copies.append((origin, paths[:-1], paths[-1]))
        return cls(stages)


def _instructions(text: str):
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, args = line.partition(" ")
            yield instruction.upper(), args.strip()


class DockerIgnore:
    """.dockerignore patterns (Go filepath.Match plus `**`, `!` re-includes, last match wins)."""

    def __init__(self, text: str):
        self.rules = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pattern = line.lstrip("!").strip("/")
            self.rules.append((negate, re.compile(_glob_to_regex(pattern))))

    def excluded(self, relative: str) -> bool:
        parts = relative.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        verdict = False
        for negate, regex in self.rules:
            if any(regex.fullmatch(p) for p in prefixes):
                verdict = not negate
        return verdict


def _glob_to_regex(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def copy_context(context: Path, sources: list[str], dest: Path, ignore: DockerIgnore) -> None:
    """COPY sources from the build context into dest, leaving out what .dockerignore excludes."""
    for source in sources:
        origin = (context / source).resolve()
        if origin.is_file():
            shutil.copy2(origin, dest / origin.name if source != "." else dest)
            continue
        for path in sorted(origin.rglob("*")):
            relative = path.relative_to(context).as_posix()
            if ignore.excluded(relative) or not path.is_file():
                continue
            target = dest / path.relative_to(origin)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
