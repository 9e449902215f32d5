"""What a result means: statuses, causes, where a gradient is lost, forward findings, regressions.

May import engine and everything below it."""
