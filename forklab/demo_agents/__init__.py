"""Code-first demo agents (SPEC §7): plain loops over the official vendor clients, recorded
and forked as ``workflow`` runs. Allowed by default (``FORKLAB_WORKFLOW_MODULES``)."""
