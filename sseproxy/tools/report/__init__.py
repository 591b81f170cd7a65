"""`sseproxy report`: a summary of many records, read as a stream in bounded memory."""

from sseproxy.tools.report.summary import Bounds, Summary

__all__ = ["Bounds", "Summary"]
