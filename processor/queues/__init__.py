"""Message queues (issue 22; docs/queues.md): every publish to a queue's underlying topics
is a message delivered to one subscriber at a time under a lease, and removed when
acknowledged.

:mod:`processor.queues.ledger` holds one queue partition's decisions (order, leases,
backlogs, fairness, acknowledgements, returns, expiry, barriers), with no I/O; the
processor's queue partitions persist what it decides.
"""
