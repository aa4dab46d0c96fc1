"""``mmrl diagnose``: EFS and claim persistence from re-scoring fixed responses under an intervened media."""
from mmrl.diagnose.core import diagnose_samples, response_records, summarize

__all__ = ["diagnose_samples", "response_records", "summarize"]
