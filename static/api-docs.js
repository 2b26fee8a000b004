// Renders /api/docs with the vendored Redoc. Started from here rather than by Redoc's own
// <redoc spec-url> auto-start so that its telemetry (a beacon to a third-party collector) is off.
import { init } from "./vendor/redoc-3.0.1/redoc.standalone.js";

const element = document.getElementById("api-docs");
init(element.dataset.specUrl, { disableTelemetry: true }, element);
