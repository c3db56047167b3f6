"""A subscribe request, parsed and validated once: the plan the hub, the subscription and
its sender all work from.

:func:`plan_subscription` resolves the topics, compiles the filter, parses the bookmark,
the pagination (a window's order), the conflation interval and key, the select list and
delta rules (the :class:`~processor.subscriptions.shape.MessageShape`), and checks every
option against the others, raising an InvalidRequestError that names the option. Nothing
is parsed again later: a replace builds a new plan and the subscription takes it whole.
What depends on the service's state (caught up, how many subscriptions) is the hub's to
check when it admits the plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from processor.changelog.bookmarks import Bookmark, parse_bookmark
from processor.errors import CatchingUpError, InvalidRequestError, TooManySubscriptionsError
from processor.expr import Aggregation, Expression, compile_aggregation
from processor.expr.ast import OrderKey
from processor.messages import Codec
from processor.query.sow import DEFAULT_TIMEOUT_S
from processor.replica.plain_tail import PlainTail
from processor.replica.replica import Replica
from processor.security import OPEN, RequestContext
from processor.security.reads import entitled, read_restriction
from processor.subscriptions.conflation import KeyOf, key_function, parse_interval
from processor.subscriptions.model import DEFAULT_MAX_BACKLOG, MAX_MAX_BACKLOG, SubscribeRequest
from processor.subscriptions.shape import MessageShape
from processor.subscriptions.window import check_pagination, check_window_filter, is_paginated
from processor.topology.model import PlainTopic, SowTopic, Topic, Topology
from processor.topology.topics import (
    is_pattern,
    resolve_subscribed_topics,
    restricted,
    topic_restriction,
)

#: Compiles a filter for the topics it runs on (the dispatcher shares equal filters).
Compile = Callable[[list[Topic], str], "Expression | None"]


@dataclass(frozen=True, slots=True)
class SubscriptionPlan:
    """What one subscribe or sow_and_subscribe asks for, checked (module doc).

    ``request`` is the request as served: on plain topics only, ``oof`` and
    ``no_empties`` are off (their messages are not records that change). ``with_query``
    is False for a sow_and_subscribe on plain topics only (no records to return).
    ``unheld`` names the plain topics among ``topics``: their messages are delivered and
    never held. ``order`` is a paginated window's order (None: not paginated).
    """

    request: SubscribeRequest
    with_query: bool
    topics: tuple[Topic, ...]
    expression: Expression | None
    bookmark: Bookmark
    order: tuple[OrderKey, ...] | None
    interval_s: float | None
    key_of: KeyOf | None
    shape: MessageShape | None
    unheld: frozenset[str]
    max_backlog: int
    #: Who subscribed, and the rights its filter was planned with (a reload of the
    #: entitlements re-plans the subscription with the new ones).
    context: RequestContext = OPEN
    #: An aggregated subscription's aggregation (None: not aggregated), and the filter
    #: text ``expression`` was compiled from (the subscriber's, restricted and entitled).
    aggregation: Aggregation | None = None
    filter_text: str = ""

    @property
    def paginated(self) -> bool:
        return self.order is not None

    @property
    def plain_only(self) -> bool:
        return len(self.unheld) == len(self.topics)

    @property
    def replaying(self) -> bool:
        """A bookmark that replays the log (not "now")."""
        return not self.bookmark.now

    def sow_topics(self) -> list[SowTopic]:
        return [t for t in self.topics if isinstance(t, SowTopic)]


def plan_subscription(
    request: SubscribeRequest,
    *,
    with_query: bool,
    topology: Topology,
    codecs: Mapping[str, Codec],
    compile_filter: Compile,
    replacing: bool = False,
    context: RequestContext = OPEN,
) -> SubscriptionPlan:
    """The plan of ``request`` (a sow_and_subscribe when ``with_query``); raises
    InvalidRequestError naming what is wrong and what to do, NotEntitledError when the
    caller may not read the topic. The caller's entitlement filter is AND-ed into the
    subscription's filter, so every path that reads through the plan (the query phase,
    live changes, OOF, windows, conflation, replays) gets it."""
    if request.replace and not replacing:
        raise InvalidRequestError(
            "replace=true replaces a live subscription of a Session: send it as a "
            "session command with that subscription's sub_id"
        )
    order = check_pagination(request, with_query=with_query)
    interval = parse_interval(request.conflation)
    if interval is None and request.conflation_key.strip():
        raise InvalidRequestError(
            f"conflation_key {request.conflation_key!r} needs a conflation interval "
            "(conflation=250ms, 1s, ...)"
        )
    key_of = None if interval is None else key_function(request, dict(codecs))
    topics = resolve_subscribed_topics(topology, request.topic)
    if request.max_backlog < 0 or request.max_backlog > MAX_MAX_BACKLOG:
        raise InvalidRequestError(
            f"max_backlog {request.max_backlog} is out of range: use 1 to "
            f"{MAX_MAX_BACKLOG} (0 means the default, {DEFAULT_MAX_BACKLOG})"
        )
    restriction = topic_restriction(topology, request.topic)
    entitlement = read_restriction(context.rights, topology, request.topic)
    if restriction is not None or entitlement is not None:  # the subscriber's filter alone
        compile_filter(topics, request.filter)
    text = entitled(restricted(request.filter, restriction), entitlement)
    expression = compile_filter(topics, text)
    unheld = frozenset(t.name for t in topics if isinstance(t, PlainTopic))
    paginated = is_paginated(request)
    if paginated:
        if (is_pattern(request.topic) and request.topic not in topology.topics) or unheld:
            raise InvalidRequestError(
                f"a paginated subscription reads one literal SOW topic; {request.topic!r} "
                "is a regular expression or a topic without a SOW"
            )
        check_window_filter(request, expression, "paginated subscription")
    shape = MessageShape.for_request(
        topics,
        codecs,
        select=request.select,
        delta=request.delta,
        no_empties=request.no_empties,
        text_form=request.text_form,
    )
    bookmark = parse_bookmark(request.bookmark)
    literal = topology.topics.get(request.topic)
    aggregation = check_aggregated(request, literal if isinstance(literal, SowTopic) else None)
    if aggregation is not None:
        check_window_filter(request, expression, "aggregated subscription")
    plain_only = len(unheld) == len(topics)
    if plain_only:
        request = dataclasses.replace(request, oof=False, no_empties=False)
    return SubscriptionPlan(
        request=request,
        with_query=with_query and not plain_only,
        topics=tuple(topics),
        expression=expression,
        bookmark=bookmark,
        order=order if paginated and with_query else None,
        interval_s=interval,
        key_of=key_of,
        shape=shape,
        unheld=unheld,
        max_backlog=request.max_backlog or DEFAULT_MAX_BACKLOG,
        context=context,
        aggregation=aggregation,
        filter_text=text,
    )


def check_aggregated(request: SubscribeRequest, topic: SowTopic | None) -> Aggregation | None:
    """The aggregation a request asks for (None: not aggregated); raises
    InvalidRequestError naming what cannot go with it (spec 3.17)."""
    projection, grouping = request.projection.strip(), request.grouping.strip()
    if not projection and not grouping:
        return None
    if not (projection and grouping):
        raise InvalidRequestError(
            "an aggregated subscription needs both projection and grouping "
            f"(got projection={request.projection!r}, grouping={request.grouping!r})"
        )
    if topic is None:
        raise InvalidRequestError(
            f"an aggregated subscription reads one literal SOW topic; {request.topic!r} is "
            "a regular expression or a topic without a SOW"
        )
    refused = [
        name
        for name, given in (
            ("select (choose fields with the projection)", request.select.strip()),
            ("bookmark", request.bookmark.strip()),
            ("top_n / skip_n / order_by", request.top_n or request.skip_n is not None),
            ("order_by", request.order_by.strip()),
            ("conflation", request.conflation.strip()),
            ("delta", request.delta),
        )
        if given
    ]
    if refused:
        raise InvalidRequestError(
            f"an aggregated subscription cannot take {', '.join(refused)}: subscribe "
            "without them, or query a view with the same definition"
        )
    return compile_aggregation(projection, grouping)


def refuse_with_replay(request: SubscribeRequest, what: str) -> None:
    """Options a replaying subscription cannot have (spec 3.10: bookmark delta
    subscriptions are rejected; a replayed window is not built)."""
    refused = [name for name in ("delta", "replace") if getattr(request, name)]
    if request.skip_n is not None:
        refused.append("skip_n (a paginated window)")
    if refused:
        raise InvalidRequestError(
            f"{what} cannot take {', '.join(refused)}: replay without it, or subscribe "
            "from now (no bookmark)"
        )


def admit(
    plan: SubscriptionPlan,
    replica: Replica,
    tail: PlainTail | None,
    limits: tuple[int, int],
    *,
    replacing: bool = False,
) -> SubscriptionPlan:
    """Check that a service can serve ``plan`` now: it follows the plain topics it names
    (``tail``), is caught up with the SOW topics, and has room for one more subscription
    (``limits``: how many it serves, how many at most; not counted for a replace).
    Returns ``plan``."""
    plain = sorted(plan.unheld)
    if plain and tail is None:
        raise InvalidRequestError(
            f"topics {', '.join(plain)} have no SOW and this query service does not "
            "follow plain topics; subscribe through a service that does"
        )
    if plain and tail is not None and not tail.wait_ready(DEFAULT_TIMEOUT_S):
        raise CatchingUpError(
            f"the ends of plain topics {', '.join(plain)} were not fetched within "
            f"{DEFAULT_TIMEOUT_S:g}s; subscribe again shortly"
        )
    if (
        not plan.plain_only
        and not replica.caught_up()
        and not replica.wait_caught_up(DEFAULT_TIMEOUT_S)
    ):
        raise CatchingUpError(
            f"not caught up within {DEFAULT_TIMEOUT_S:g}s: "
            f"{replica.catch_up_status()}; subscribe again shortly"
        )
    serving, most = limits
    if not replacing and serving >= most:
        raise TooManySubscriptionsError(
            f"this query service already serves {most} "
            "subscriptions; subscribe to another query-service replica or retry later"
        )
    return plan
