from django.contrib import admin

from forklab.runs import models


class MembershipInline(admin.TabularInline[models.Membership, models.Project]):
    model = models.Membership
    extra = 0


@admin.register(models.Project)
class ProjectAdmin(admin.ModelAdmin[models.Project]):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]


@admin.register(models.Membership)
class MembershipAdmin(admin.ModelAdmin[models.Membership]):
    list_display = ["user", "project", "role"]
    list_filter = ["role", "project"]


class GraphVersionInline(admin.TabularInline[models.GraphVersion, models.Graph]):
    model = models.GraphVersion
    extra = 0
    fields = readonly_fields = ("version", "spec_hash", "created_at")
    can_delete = False


@admin.register(models.Graph)
class GraphAdmin(admin.ModelAdmin[models.Graph]):
    list_display = ["graph_id", "name", "project"]
    list_filter = ["project"]
    inlines = [GraphVersionInline]


@admin.register(models.GraphVersion)
class GraphVersionAdmin(admin.ModelAdmin[models.GraphVersion]):
    list_display = ["graph", "version", "spec_hash", "created_at"]
    readonly_fields = ["graph", "version", "spec", "spec_hash"]


@admin.register(models.Run)
class RunAdmin(admin.ModelAdmin[models.Run]):
    list_display = [
        "id", "graph_slug", "graph_version_number", "run_kind", "status", "label",
        "cost_usd", "created_at",
    ]
    list_filter = ["status", "run_kind", "project"]
    search_fields = ["id", "label", "graph_slug"]
    # The log is the truth: the admin shows the projection but never edits it.
    readonly_fields = [f.name for f in models.Run._meta.fields]


@admin.register(models.Event)
class EventAdmin(admin.ModelAdmin[models.Event]):
    list_display = ["run", "seq", "type", "node", "occurrence", "iteration", "at"]
    list_filter = ["type"]
    search_fields = ["run__id"]
    readonly_fields = [f.name for f in models.Event._meta.fields]


@admin.register(models.Snapshot)
class SnapshotAdmin(admin.ModelAdmin[models.Snapshot]):
    list_display = ["run", "version", "created_at"]


@admin.register(models.UsageRecord)
class UsageRecordAdmin(admin.ModelAdmin[models.UsageRecord]):
    list_display = ["run", "seq", "node", "role", "model", "label", "cost_usd"]
    list_filter = ["label", "model"]


@admin.register(models.Case)
class CaseAdmin(admin.ModelAdmin[models.Case]):
    list_display = ["name", "project", "source_run", "created_at"]


@admin.register(models.ForkRequest)
class ForkRequestAdmin(admin.ModelAdmin[models.ForkRequest]):
    list_display = ["client_request_id", "project", "user", "fork_run", "created_at"]


@admin.register(models.ShareLink)
class ShareLinkAdmin(admin.ModelAdmin[models.ShareLink]):
    list_display = ["token", "project", "target_kind", "revoked_at", "created_at"]
