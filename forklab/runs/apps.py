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
        # a deleted run's forks keep their prefix by reference to its log: copy it first
        from django.db.models.signals import pre_delete

        from forklab.runs.models import Run
        from forklab.runs.store import on_run_deleted

        pre_delete.connect(on_run_deleted, sender=Run, dispatch_uid="forklab-forked-rows")
