"""Saved cases (regression suites built from forks) and fork idempotency keys."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from forklab.runs.models.access import Project
from forklab.runs.models.graphs import GraphVersion
from forklab.runs.models.runs import Run


class Case(models.Model):
    """A finished fork saved by name: its inputs, changes and recorded results (SPEC §3.9)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="cases")
    name = models.CharField(max_length=200)
    source_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="cases"
    )
    graph_version = models.ForeignKey(
        GraphVersion, null=True, blank=True, on_delete=models.RESTRICT, related_name="cases"
    )
    input = models.JSONField(default=dict, blank=True)
    changes = models.JSONField(default=list, blank=True)
    recorded = models.JSONField(default=dict, blank=True)  # events / results the tail recorded
    criteria = models.JSONField(default=list, blank=True)  # assertions over final memory
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="case_unique_name"),
        ]

    def __str__(self) -> str:
        return self.name


class ForkRequest(models.Model):
    """``client_request_id`` idempotency: the same key again returns the same fork."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="fork_requests")
    client_request_id = models.CharField(max_length=200)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="fork_requests"
    )
    # No database constraint: the fork's run row appears when its tail starts recording.
    fork_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False,
        related_name="+",
    )
    body = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "user", "client_request_id"], name="forkrequest_unique_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.client_request_id} -> {self.fork_run_id}"
