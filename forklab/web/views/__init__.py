"""The dashboard's views, one module per page (SPEC §4.5)."""
