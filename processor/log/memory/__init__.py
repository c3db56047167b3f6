"""An in-process log with Kafka's semantics, for the broker-free driver (:mod:`processor.testing`).

:class:`MemoryLog` is the broker: topics of partitions whose offsets start at 0 and never
repeat, transactions whose records are invisible to readers until committed (an abort
leaves them in the log, skipped; each commit or abort writes a control marker that takes
an offset, as Kafka's do), producer epochs that fence an older producer with the same
transactional id (and abort what it left open), and consumer group offsets committed
with a transaction. Every reader is read_committed: it sees records below the partition's
last stable offset (the first offset of its earliest open transaction, else its end).

The clients implement the interfaces of :mod:`processor.log` over it, so the real engine
loop, commit protocol and read replica run on it unchanged. What it leaves out: groups of
more than one member (the input log takes every partition, as static assignment does),
compaction, and retention. :meth:`MemoryLog.lose` empties a topic as a broker that lost
its log does (offsets start again at 0).

Thread-safe: one lock guards the log, and one condition wakes every waiting reader when a
record becomes visible."""
