"""forklab: fork recorded agent-workflow runs, change one thing, see what became different."""

__version__ = "0.1.0"
