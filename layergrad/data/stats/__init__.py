"""What adds up over batches: `reductions` (the few numbers a compiled step keeps per batch),
`accumulators` (their sums over batches and replicas), `aggregates` (the report's numbers
from those sums) and `sample_ranking` (a per-sample norm's distribution and top k)."""
