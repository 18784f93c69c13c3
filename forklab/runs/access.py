"""Who may do what (SPEC §4.5 Access): viewers read, members fork within default budgets,
admins raise budgets, allow writes and manage shares. Superusers are admins everywhere.

A run outside the user's projects does not exist for them (``not_found``), never
``permission_denied``: the API must not confirm that someone else's run exists.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.contrib.auth.models import User as Account

from forklab.engine.errors import ForklabError
from forklab.engine.fork.wire import (
    DEFAULT_MAX_COST_USD,
    DEFAULT_MAX_LIVE_CALLS,
    AllowList,
    Budget,
    Policy,
)
from forklab.runs.models import Membership, Project, Role

RANK = {Role.VIEWER: 1, Role.MEMBER: 2, Role.ADMIN: 3}

# ``Account``: settings.AUTH_USER_MODEL (Django's own user), what owns memberships and rows;
# ``User``: whoever sent a request, signed in or not.
User = Account | AnonymousUser


def account(user: User | None) -> Account | None:
    """The signed-in account behind ``user``; None for an anonymous (or no) user. What a
    row's ``created_by`` records."""
    return user if isinstance(user, Account) and user.is_authenticated else None


def signed_in(user: User, *, action: str) -> Account:
    """``user`` as an account; ``permission_denied`` for an anonymous user."""
    found = account(user)
    if found is None:
        raise PermissionDenied(f"{action} needs a signed-in user", required="member", role=None)
    return found


class PermissionDenied(ForklabError):
    code = "permission_denied"


def role_in(user: User, project: Project) -> str | None:
    """The user's role in ``project`` (``admin`` for superusers), or None."""
    if isinstance(user, AnonymousUser) or not user.is_authenticated:
        return None
    if user.is_superuser:
        return Role.ADMIN
    return (Membership.objects.filter(user=user, project=project)
            .values_list("role", flat=True).first())


_UNKNOWN = object()


def require_role(user: User, project: Project, minimum: str, *, action: str,
                 role: Any = _UNKNOWN) -> str:
    """Raise ``permission_denied`` unless the user's role is at least ``minimum`` (``role``:
    the role already read with the run, saving the lookup)."""
    role = role_in(user, project) if role is _UNKNOWN else role
    if role is None or RANK[Role(role)] < RANK[Role(minimum)]:
        raise PermissionDenied(
            f"{action} needs the {minimum} role in project {project.slug!r}; you are "
            f"{role or 'not a member'}. Ask a project admin.",
            required=minimum, role=role,
        )
    return str(role)


def admin_only_reasons(*, policy: Policy, budget: Budget, ignore_budget: bool) -> list[str]:
    """What in a fork request needs an admin (empty when a member may send it): only what
    the request set counts (``budget.max_cost_usd`` left out is the default, not a clear)."""
    reasons = []
    side_effects = policy.side_effects
    if isinstance(side_effects, AllowList) and side_effects.allow:
        reasons.append("allowing a write")
    calls = budget.max_live_calls
    if calls is None or calls > DEFAULT_MAX_LIVE_CALLS:
        reasons.append(f"raising max_live_calls above {DEFAULT_MAX_LIVE_CALLS}")
    cost = budget.max_cost_usd
    if "max_cost_usd" in budget.model_fields_set and cost is None:
        reasons.append("clearing the cost budget")
    elif cost is not None and cost > DEFAULT_MAX_COST_USD:
        reasons.append(f"raising max_cost_usd above ${DEFAULT_MAX_COST_USD:.2f}")
    if ignore_budget:
        reasons.append("ignoring the budget")
    return reasons


def require_fork_rights(user: User, project: Project, *, policy: Policy, budget: Budget,
                        ignore_budget: bool, role: Any = _UNKNOWN) -> None:
    """Members fork within default budgets; anything beyond needs an admin."""
    role = require_role(user, project, Role.MEMBER, action="forking", role=role)
    reasons = admin_only_reasons(policy=policy, budget=budget, ignore_budget=ignore_budget)
    if reasons and role != Role.ADMIN:
        raise PermissionDenied(
            f"{' and '.join(reasons)} needs the admin role in project {project.slug!r}; you "
            f"are {role}. Remove it, or ask a project admin.",
            required=Role.ADMIN, role=role, reasons=reasons,
        )


#: run columns a fork request never reads (loading them would decode the base's whole state)
BULKY_RUN_FIELDS = ("input", "memory", "path", "error", "work", "fork_mutations")


def readable_run_and_role(user: User, run_id: str) -> tuple[Any, str | None]:
    """The run (``not_found`` outside the user's projects, as ``queries.get_run``) and the
    user's role in its project, in one query: what every fork request checks first.

    The run comes with its project loaded and without its bulky JSON columns
    (``BULKY_RUN_FIELDS``, deferred: reading one costs a query of its own). The statement
    is plain SQL built once from the models (``_RunAndRole``): the ORM's queryset for the
    same join cost ~1.9 ms of CPU to build per request against ~0.1 ms to run it, on a
    path every fork of a burst takes.
    """
    from forklab.runs.errors import NotFound

    if isinstance(user, AnonymousUser) or not user.is_authenticated:
        found = None
    else:
        found = _RunAndRole.fetch(run_id, None if user.is_superuser else user.pk)
    if found is None:
        raise NotFound(f"no run {run_id!r}", run_id=run_id)
    run, role = found
    return run, Role.ADMIN if user.is_superuser else role


class _RunAndRole:
    """``SELECT`` a run (bulky columns deferred) joined with its project and, for a
    non-superuser, the user's membership; rows come back as model instances exactly as
    the ORM makes them (``Model.from_db`` with the backend's and fields' converters)."""

    _built: dict[tuple[str, bool], tuple[str, list[Any], list[Any], list[Any]]] = {}

    @classmethod
    def fetch(cls, run_id: str, user_id: Any) -> tuple[Any, str | None] | None:
        from django.db import connection

        from forklab.runs.models import Run

        sql, run_fields, project_fields, converters = cls._build(connection,
                                                                 user_id is not None)
        params = [run_id] if user_id is None else [user_id, run_id]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        values = []
        for value, (field_converters, expression) in zip(row, converters, strict=False):
            for converter in field_converters:
                value = converter(value, expression, connection)
            values.append(value)
        n = len(run_fields)
        run = Run.from_db(connection.alias, [f.attname for f in run_fields], values[:n])
        project = Project.from_db(connection.alias, [f.attname for f in project_fields],
                                  values[n:n + len(project_fields)])
        Run._meta.get_field("project").set_cached_value(run, project)  # as select_related
        role = row[-1] if user_id is not None else None
        return run, role

    @classmethod
    def _build(cls, connection: Any,
               member: bool) -> tuple[str, list[Any], list[Any], list[Any]]:
        key = (connection.vendor, member)
        built = cls._built.get(key)
        if built is not None:
            return built
        from forklab.runs.models import Run

        quote = connection.ops.quote_name
        run_table, project_table = quote(Run._meta.db_table), quote(Project._meta.db_table)
        member_table = quote(Membership._meta.db_table)
        run_fields = [f for f in Run._meta.concrete_fields if f.name not in BULKY_RUN_FIELDS]
        project_fields = list(Project._meta.concrete_fields)
        columns = ([f"{run_table}.{quote(f.column)}" for f in run_fields]
                   + [f"{project_table}.{quote(f.column)}" for f in project_fields])
        run_project = f"{run_table}.{quote(Run._meta.get_field('project').column)}"
        sql = (f"SELECT {', '.join(columns)}" + (f", {member_table}.{quote('role')}"
                                                 if member else "")
               + f" FROM {run_table} INNER JOIN {project_table} ON "
               f"{project_table}.{quote(Project._meta.pk.column)} = {run_project}")
        if member:
            sql += (f" INNER JOIN {member_table} ON "
                    f"{member_table}.{quote(Membership._meta.get_field('project').column)} = "
                    f"{run_project} AND "
                    f"{member_table}.{quote(Membership._meta.get_field('user').column)} = %s")
        sql += f" WHERE {run_table}.{quote(Run._meta.pk.column)} = %s"
        converters = []
        for table, fields in ((Run._meta.db_table, run_fields),
                              (Project._meta.db_table, project_fields)):
            for field in fields:
                expression = field.get_col(table)
                converters.append((connection.ops.get_db_converters(expression)
                                   + field.get_db_converters(connection), expression))
        built = cls._built[key] = (sql, run_fields, project_fields, converters)
        return built
