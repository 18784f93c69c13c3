"""Server-rendered pages (Django templates + htmx). Reads through forklab.runs.queries."""
