"""Page-number pagination for the API's lists: ``{count, next, previous, results}``.

``page`` and ``page_size`` are bounded: a page number that is not a positive integer below
2**31, or a page size that is not an integer from 1 to 500, is a 400 ``invalid_request``
naming the parameter and its range (``?page=10**20`` never reaches the database, and a bad
size is never silently replaced by the default); a page past the end is DRF's 404. An
empty ``?page_size=`` (as a form sends it) means the default.
"""

from __future__ import annotations

from typing import Any

from rest_framework.pagination import PageNumberPagination

from forklab.runs.specs import InvalidRequest

MAX_PAGE = 2**31 - 1


class Pages(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_number(self, request: Any, paginator: Any) -> Any:
        raw = super().get_page_number(request, paginator)
        if raw in self.last_page_strings:
            return raw
        return str(_bounded("page", str(raw), MAX_PAGE))

    def get_page_size(self, request: Any) -> int:
        raw = request.query_params.get(self.page_size_query_param, "")
        return _bounded("page_size", raw, self.max_page_size) if raw else self.page_size


def _bounded(name: str, text: str, most: int) -> int:
    """``text`` as an integer from 1 to ``most``, else ``invalid_request`` naming ``name``."""
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= most:
        raise InvalidRequest(f"field '{name}': expected an integer from 1 to {most}, "
                             f"got {text[:40]!r}", field=name, min=1, max=most)
    return int(text)
