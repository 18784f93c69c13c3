"""REST API (Django REST framework) over forklab.runs services and queries."""
