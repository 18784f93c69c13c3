"""Graphs and their immutable versions (SPEC §1: a run resolves to the exact version it ran)."""

from __future__ import annotations

from django.db import models

from forklab.runs.models.access import Project


class Graph(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="graphs")
    graph_id = models.SlugField(max_length=100)  # the engine's GraphSpec.id
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["graph_id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "graph_id"], name="graph_unique_id"),
        ]

    def __str__(self) -> str:
        return self.graph_id


class GraphVersion(models.Model):
    """One stored version; ``spec`` is ``GraphSpec.to_wire()``, never changed after insert."""

    graph = models.ForeignKey(Graph, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    spec = models.JSONField()
    spec_hash = models.CharField(max_length=64)  # forklab.engine.store.graph_hash
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["graph", "version"]
        constraints = [
            models.UniqueConstraint(fields=["graph", "version"], name="graphversion_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.graph.graph_id}@{self.version}"
