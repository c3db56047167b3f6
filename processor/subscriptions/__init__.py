"""Subscriptions: ``subscribe`` and ``sow_and_subscribe`` over the read replica.

Transport-free (the gRPC service translates): :class:`~processor.subscriptions.hub.
SubscriptionHub` takes subscription requests, listens to the replica's change events once
for all subscriptions, finds the candidate subscriptions of each change through an index
(:mod:`processor.subscriptions.fanout`) and queues what each must receive
(:mod:`processor.subscriptions.subscription`). See docs/subscriptions.md.
"""
