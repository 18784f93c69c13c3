"""Page-number pagination for the API's lists: ``{count, next, previous, results}``.

``page`` and ``page_size`` are bounded: a page number that is not a positive integer below
2**31 is a 400 ``invalid_request`` (``?page=10**20`` never reaches the database); a page
past the end is DRF's 404; ``page_size`` is clamped to 500.
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
        text = str(raw)
        if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
            raise InvalidRequest(f"field 'page': expected an integer from 1 to {MAX_PAGE}, "
                                 f"got {text[:40]!r}", field="page")
        return text
