"""Plain ``INSERT``s of model rows, their SQL built once per model.

``Model.objects.create`` compiles its ``INSERT`` afresh for every row — the query object,
the compiler, quoting every column — and that compiling cost more CPU than the database took
to run it: ~0.8 ms of a ~4 ms fork accept for the run row alone. The fork accept inserts two
rows (the queued run and, with the database queue, its task) in one transaction, so here the
statement text is made once per model and connection vendor, and on PostgreSQL both rows go
in one round trip.

What the ORM still does per row: each field's ``pre_save`` (``auto_now_add``, defaults are
set by the model's constructor) and ``get_db_prep_save`` (JSON encoding, dates, decimals), so
the values stored are exactly the ORM's. What it does not do: ``pre_save``/``post_save``
signals (no receiver listens to the models inserted this way: the tests say so) and
database-generated primary keys (the models inserted here carry their own).

:func:`insert_values` is the bulk form, for the log's rows (events, usage records): many
rows of one model as plain tuples in one ``executemany`` — no model instance per row, and
no per-value preparation where the value already is what the driver takes (a ``str`` for a
text column, an ``int`` for an integer one); dates, JSON and decimals are still prepared by
their field. ``bulk_create`` spent more CPU building its statement and preparing every value
than the database took to store the rows (a fork tail of 1,000 served nodes: ~40% of its
append).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db import connections, models
from django.db.models import Model

_statements: dict[tuple[type[Model], str], tuple[str, list[Any]]] = {}
_lock = threading.Lock()


def statement(model: type[Model], vendor: str, quote: Any) -> tuple[str, list[Any]]:
    """``model``'s ``INSERT`` for ``vendor`` and the fields its parameters come from."""
    key = (model, vendor)
    with _lock:
        known = _statements.get(key)
    if known is not None:
        return known
    meta = model._meta
    fields = [f for f in meta.local_concrete_fields if not getattr(f, "db_returning", False)]
    if len(fields) != len(meta.local_concrete_fields):
        raise ValueError(f"{meta.label} has a database-generated column: insert it with the ORM")
    sql = _insert_sql(meta.db_table, fields, quote)
    with _lock:
        _statements[key] = (sql, fields)
    return sql, fields


def _insert_sql(table: str, fields: Sequence[Any], quote: Any) -> str:
    return (f"INSERT INTO {quote(table)} ({', '.join(quote(f.column) for f in fields)}) "
            f"VALUES ({', '.join(['%s'] * len(fields))})")


def one_trip(connection: Any) -> bool:
    """True when one ``execute`` may carry several statements with parameters: psycopg with
    Django's default client-side binding (``server_side_binding`` off); not SQLite."""
    options = connection.settings_dict.get("OPTIONS", {})
    return bool(connection.vendor == "postgresql" and not options.get("server_side_binding"))


def insert(*rows: Model, using: str = "default") -> None:
    """Insert new ``rows`` (in this order) as the ORM's ``save(force_insert=True)`` would,
    in one round trip where the database driver takes several statements at once."""
    connection = connections[using]
    statements: list[tuple[str, list[Any]]] = []
    for row in rows:
        sql, fields = statement(type(row), connection.vendor, connection.ops.quote_name)
        statements.append((sql, [f.get_db_prep_save(f.pre_save(row, True), connection)
                                 for f in fields]))
    with connection.cursor() as cursor:
        if len(statements) > 1 and one_trip(connection):
            cursor.execute("; ".join(sql for sql, _ in statements),
                           [value for _, params in statements for value in params])
        else:
            for sql, params in statements:
                cursor.execute(sql, params)
    for row in rows:
        row._state.adding, row._state.db = False, using


# columns whose ``get_db_prep_save`` returns a value of exactly this type unchanged
_PLAIN: tuple[tuple[type[models.Field[Any, Any]], tuple[type, ...]], ...] = (
    (models.CharField, (str,)),
    (models.TextField, (str,)),
    (models.IntegerField, (int,)),  # and its Small/Big/Positive kinds
    (models.FloatField, (float,)),
    (models.BooleanField, (bool,)),
)


def _preparer(field: Any, connection: Any) -> Callable[[Any], Any]:
    """How a value of ``field`` becomes a parameter: as is when it already has the column's
    plain type (or is None), else through the field, exactly as the ORM prepares it."""
    target = field.target_field if field.is_relation else field
    prepare = field.get_db_prep_save
    if isinstance(target, models.DateTimeField):
        adapt = connection.ops.adapt_datetimefield_value

        def moment(value: Any) -> Any:
            # an aware datetime needs none of get_prep_value's parsing or naive warnings
            if type(value) is datetime and value.tzinfo is not None:
                return adapt(value)
            return prepare(value, connection)

        return moment
    plain = next((kinds for kind, kinds in _PLAIN if isinstance(target, kind)), ())

    def prepared(value: Any) -> Any:
        # exact types: a bool is no int here, nor a str subclass a str
        return value if value is None or type(value) in plain else prepare(value, connection)

    return prepared


def insert_values(model: type[Model], attnames: Sequence[str], rows: Sequence[Sequence[Any]],
                  *, using: str = "default") -> None:
    """Insert ``rows`` (tuples of ``attnames``' values, in order) into ``model``'s table in
    one ``executemany``.

    ``attnames`` must name every concrete field but a database-generated primary key: a
    Python-side default is not applied here, so a missing column is an error, not a guess.
    """
    meta = model._meta
    fields = {f.attname: f for f in meta.local_concrete_fields
              if not getattr(f, "db_returning", False)}
    missing = sorted(set(fields) - set(attnames))
    unknown = sorted(set(attnames) - set(fields))
    if missing or unknown:
        raise ValueError(f"insert_values into {meta.label}: columns missing {missing}, "
                         f"not insertable {unknown}")
    if not rows:
        return
    connection = connections[using]
    columns = [fields[name] for name in attnames]
    sql = _insert_sql(meta.db_table, columns, connection.ops.quote_name)
    prepare = [_preparer(f, connection) for f in columns]
    params = [[p(value) for p, value in zip(prepare, row, strict=True)] for row in rows]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
