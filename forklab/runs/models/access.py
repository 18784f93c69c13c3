"""Projects, who belongs to them, and read-only share links."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    VIEWER = "viewer", "viewer"  # read
    MEMBER = "member", "member"  # fork within default budgets
    ADMIN = "admin", "admin"  # raise budgets, allow writes, manage shares


class Project(models.Model):
    """The unit of access: every graph, run and case belongs to exactly one project."""

    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="projects"
    )

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="membership_unique_user"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} as {self.role}"


class ShareLink(models.Model):
    """A revocable read-only link for people without an account."""

    class TargetKind(models.TextChoices):
        RUN = "run"
        DIFF = "diff"
        SWEEP = "sweep"
        POINT = "point"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="share_links")
    token = models.CharField(max_length=64, unique=True)
    target_kind = models.CharField(max_length=10, choices=TargetKind.choices)
    target = models.JSONField(default=dict)  # e.g. {"run": id} or {"base": id, "variant": id}
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def __str__(self) -> str:
        return f"share {self.target_kind} {self.token[:8]}…"
