"""Running the engine: settings, metrics, failure streaks, observed integration calls, logs,
migrations."""
