"""Observability: the log and its writer, redaction, metrics, tracing, the record schema.

No server code: the shell imports these, never the other way round.
"""
