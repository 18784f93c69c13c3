from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "forklab.runs"
    label = "runs"
    verbose_name = "forklab runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Every process (daphne, queue workers, commands) exports traces when configured.
        from forklab.runs.observability import configure_tracing

        configure_tracing()
