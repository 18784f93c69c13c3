from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "forklab.runs"
    label = "runs"
    verbose_name = "forklab runs"
    default_auto_field = "django.db.models.BigAutoField"
