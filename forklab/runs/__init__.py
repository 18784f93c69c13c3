"""The Django app where the engine meets the database: models, the event store on the ORM,
services (use cases), read-only queries and management commands."""
