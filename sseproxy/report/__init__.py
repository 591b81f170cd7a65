"""`sseproxy report`: a summary of many records, read as a stream in bounded memory."""

from .summary import Bounds, Summary

__all__ = ["Bounds", "Summary"]
