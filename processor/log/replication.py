"""How many copies of each topic the product creates, chosen from the cluster's size
unless the settings say (``SOW_REPLICATION_FACTOR``, ``SOW_MIN_INSYNC_REPLICAS``)."""

from __future__ import annotations

from dataclasses import dataclass

from processor.errors import ConfigurationError

#: Replicas of a topic at most, when the settings do not say: Kafka's usual production
#: choice, and what one broker down (or a rolling restart) needs to keep writing.
MAX_DEFAULT_REPLICATION = 3


@dataclass(frozen=True, slots=True)
class Replication:
    """How many copies of each topic the product creates (``factor``) and how many must
    have a write before a producer (acks=all) is told it is done (``min_insync``).

    None leaves the choice to :meth:`resolve`, which knows the cluster's size: the
    factor is the number of brokers up to :data:`MAX_DEFAULT_REPLICATION`, and the
    minimum in sync is 2 once there are 3 copies or more (one broker may be down without
    refusing writes, and a write acknowledged is on two brokers), else 1.
    """

    factor: int | None = None
    min_insync: int | None = None

    def resolve(self, brokers: int) -> tuple[int, int]:
        """(factor, min in sync) on a cluster of ``brokers``; ConfigurationError when the settings
        ask for more copies than there are brokers, or more in sync than copies."""
        factor = self.factor or max(1, min(brokers, MAX_DEFAULT_REPLICATION))
        if factor > brokers:
            raise ConfigurationError(
                f"the replication factor is {factor} but the cluster has {brokers} broker"
                f"{'s' if brokers != 1 else ''}: set SOW_REPLICATION_FACTOR to at most "
                f"{brokers}, or add brokers"
            )
        min_insync = self.min_insync or (2 if factor >= 3 else 1)
        if min_insync > factor:
            raise ConfigurationError(
                f"min in-sync replicas ({min_insync}) exceed the replication factor "
                f"({factor}): no write could ever succeed; set SOW_MIN_INSYNC_REPLICAS to "
                f"at most {factor}"
            )
        return factor, min_insync
