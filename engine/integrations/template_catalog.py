"""The template catalog: YAML templates in a directory (engine/integrations/templates.py says
what a template is), re-read when a file changes, and instantiation as one provider call."""

import logging
from pathlib import Path

from engine.abort import CANCEL, AbortSignal
from engine.integrations.base import (
    AppliedResource,
    ApplyError,
    Cluster,
    IntegrationError,
    ResourceRef,
)
from engine.integrations.templates import (
    CatalogError,
    InstantiationError,
    Template,
    TemplateApplyError,
    TemplateError,
    TemplateNotFound,
    load_template,
)

log = logging.getLogger(__name__)


class TemplateCatalog:
    """Templates from `*.yaml` files in a directory.

    Every file must validate at construction (a broken shipped template fails the boot). Files
    changed later are re-read on the next call; one that no longer validates is left out of the
    listing and `get` raises CatalogError for it, so one bad edit never hides the others.
    """

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise CatalogError(f"template catalog {self.directory} is not a directory")
        self._stamp: dict[Path, int] = {}
        self._templates: dict[str, Template] = {}
        self._errors: dict[str, str] = {}
        self._refresh()
        if self._errors:
            raise CatalogError("; ".join(self._errors.values()))

    def templates(self) -> list[Template]:
        """Every valid template, by name."""
        self._refresh()
        return [self._templates[name] for name in sorted(self._templates)]

    def get(self, name: str) -> Template:
        """One template; TemplateNotFound, or CatalogError when its file does not validate."""
        self._refresh()
        if name in self._errors:
            raise CatalogError(self._errors[name])
        if name not in self._templates:
            raise TemplateNotFound(f"no template named {name!r} in the catalog")
        return self._templates[name]

    def declared_sensitive_keys(self, name: str, given: set[str]) -> list[str]:
        """The names among `given` (what a create request carries a value for) that template
        `name` declares sensitive.

        Lets create strip declared secrets with innocuous names before the first insert; only
        supplied names are returned, so an optional secret that was never given is never re-asked.
        """
        try:
            template = self.get(name)
        except TemplateError:
            return []  # the runner reports it; create strips by the shared predicate alone
        return sorted(template.sensitive_names & given)

    def instantiate(
        self, manifests: list[dict], *, cluster: Cluster, abort: AbortSignal
    ) -> list[AppliedResource]:
        """Apply every document of one instance as a single provider call.

        Atomic as the runner sees it: a cancel arriving mid-way lets the call finish (the cancel
        lands before or after it, never between documents); a shutdown or a lost lease still stops
        it. A refused document raises TemplateApplyError, any other integration failure
        InstantiationError, both carrying what had been applied.
        """
        abort.raise_if_aborted()
        inner = AbortSignal()

        def forward() -> None:
            if abort.reason != CANCEL:
                inner.abort(abort.reason)

        abort.on_abort(forward)
        applied: list[AppliedResource] = []
        try:
            for manifest in manifests:
                ref = ResourceRef.of(manifest)
                try:
                    applied.append(cluster.apply(manifest, abort=inner))
                except ApplyError as exc:
                    raise TemplateApplyError(
                        str(exc), ref=ref, applied=applied, reason=exc.reason
                    ) from exc
                except IntegrationError as exc:
                    raise InstantiationError(
                        str(exc), ref=ref, applied=applied, reason=exc.reason
                    ) from exc
        finally:
            abort.remove(forward)
        return applied

    # -- loading ---------------------------------------------------------------------------------
    def _refresh(self) -> None:
        paths = sorted(self.directory.glob("*.yaml")) + sorted(self.directory.glob("*.yml"))
        stamp = {p: p.stat().st_mtime_ns for p in paths}
        if stamp == self._stamp:
            return
        templates, errors = {}, {}
        for path in paths:
            try:
                template = load_template(path)
            except CatalogError as exc:
                errors[path.stem] = str(exc)
                log.error("template catalog: %s", exc)
                continue
            if template.name in templates:
                errors[template.name] = f"{path.name}: template {template.name} defined twice"
                continue
            templates[template.name] = template
        self._templates, self._errors, self._stamp = templates, errors, stamp
