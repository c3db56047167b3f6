"""Compiled filters and value expressions: :class:`Expression` and :func:`compile`.

A compiled expression is immutable and thread-safe; compiling the same text again returns
the cached object.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from processor.errors import RegexBudgetError, TooDeepError
from processor.expr import ast, parser, scan
from processor.expr.budget import count_overrun
from processor.expr.codegen import build, predicate
from processor.expr.compiler import Compiler, conjuncts
from processor.expr.inputs import ContextInput, FieldInput, Input, MessageContext
from processor.expr.values import field_getter

K = TypeVar("K")
log = logging.getLogger(__name__)
#: Serialises code generation (the compiler's name counter and namespace are shared).
_BUILD_LOCK = threading.Lock()


class Expression:
    """An AMPS expression compiled to Python.

    ``inputs`` are the message fields and message-context facts it reads, distinct, in
    first-appearance order; ``deterministic`` is False when it calls a non-deterministic
    function (UNIX_TIMESTAMP()). Code is generated on first evaluation; after that,
    evaluation never raises, for any message (an expression too deep for Python to compile
    raises TooDeepError, an ExpressionError, when first evaluated), except that a LIKE on
    the backtracking engine that overruns its budget raises RegexBudgetError (see
    :meth:`matches` for filters that count it instead)."""

    __slots__ = (
        "_built",
        "_call",
        "_compiler",
        "_drivers",
        "_eval",
        "_failed",
        "_match",
        "_refs",
        "_scan",
        "_scan_aligned",
        "_source",
        "_test",
        "code",
        "deterministic",
        "inputs",
        "node",
        "text",
    )

    _eval: Callable[..., Any]
    _test: Callable[..., bool]
    _call: Callable[[Any, MessageContext | None], Any]
    _match: Callable[[Any, MessageContext | None], bool]
    _scan: Callable[[Collection[Any], Sequence[Mapping[Any, Any]]], list[Any]]
    _scan_aligned: Callable[[Collection[Any], Sequence[Mapping[Any, Any]]], list[Any]]
    _drivers: tuple[scan.Driver, ...]
    _source: str

    def __init__(self, text: str, node: ast.Node, compiler: Compiler) -> None:
        # Emitting checks the expression (unknown functions, arity, aggregates) and finds
        # its inputs; the Python source is built and compiled on first evaluation, so an
        # expression that is only validated, or answered by an index, costs no codegen.
        self.code = compiler.emit(node)
        self._compiler = compiler
        self._refs = sorted(self.code.refs)
        self.text = text
        self.node = node
        self.inputs: tuple[Input, ...] = tuple(compiler.inputs[i] for i in self._refs)
        self.deterministic = self.code.deterministic
        self._built = False
        self._failed: TooDeepError | None = None

    @property
    def source(self) -> str:
        """The generated Python source (built on first use)."""
        return self._build()

    def _build(self) -> str:
        """Generate and compile the evaluation functions, once; thread-safe.

        The inline fast paths nest a few parentheses per operator and Python limits
        nesting, so an expression too deep for them is built from the helper-only form,
        which nests one per operator and means the same. An expression too deep even for
        that raises TooDeepError (an ExpressionError) on every evaluation."""
        with _BUILD_LOCK:
            if self._failed is not None:
                raise self._failed
            if not self._built:
                try:
                    self._source = self._generate()
                except TooDeepError:
                    self._compiler = Compiler(self.text, fast=False)
                    self.code = self._compiler.emit(self.node)
                    try:
                        self._source = self._generate()
                    except TooDeepError as exc:
                        self._failed = exc
                        raise
                self._built = True
        return self._source

    def _generate(self) -> str:
        compiler, code, refs, node = self._compiler, self.code, self._refs, self.node
        namespace = dict(compiler.namespace)
        params = ", ".join(f"v{i}" for i in refs)
        loads = []
        for i in refs:
            item = compiler.inputs[i]
            if isinstance(item, FieldInput):
                namespace[f"_g{i}"] = field_getter(item.steps)
                loads.append(f"    v{i} = _g{i}(m)\n")
            else:
                loads.append(f"    v{i} = None if c is None else c.value({item.name!r})\n")
        test = predicate(code)
        parts = conjuncts(node)
        drivers_source, drivers = scan.driver_sources(
            [code] if len(parts) == 1 else [compiler.emit(part) for part in parts], refs
        )
        source = (
            f"def _eval({params}):\n    return {code.src}\n"
            f"def _test({params}):\n    return {test}\n"
            f"def _call(m, c=None):\n{''.join(loads)}    return {code.src}\n"
            f"def _match(m, c=None):\n{''.join(loads)}    return {test}\n"
            f"{scan.per_key_source(refs, test)}{scan.aligned_source(refs, test)}"
            f"{drivers_source}"
        )
        namespace.update(compiler.namespace)
        build(namespace, source, self.text)
        self._eval = namespace["_eval"]
        self._test = namespace["_test"]
        self._call = namespace["_call"]
        self._match = namespace["_match"]
        self._scan = namespace["_scan"]
        self._scan_aligned = namespace["_scan_aligned"]
        self._drivers = tuple(
            scan.Driver(position, namespace[f"_first_{j}"], namespace.get(f"_rest_{j}"), rest)
            for j, position, rest in drivers
        )
        return source

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"

    def __call__(self, message: Any, context: MessageContext | None = None) -> Any:
        """The expression's value for one message (and its per-record context)."""
        if not self._built:
            self._build()
        return self._call(message, context)

    def matches(
        self, message: Any, context: MessageContext | None = None, *, overrun: str = ""
    ) -> bool:
        """True when the expression is TRUE for the message (a filter matches); FALSE,
        NULL and NaN do not match. A non-boolean value is read as a boolean (non-zero
        numbers are TRUE).

        A LIKE that overruns its match budget raises RegexBudgetError; with ``overrun``
        (where the filter runs: "subscription", "view"...) it is counted there instead
        (:mod:`processor.expr.budget`) and the message does not match."""
        if not self._built:
            self._build()
        try:
            return self._match(message, context)
        except RegexBudgetError:
            if not overrun:
                raise
            count_overrun(overrun)
            return False

    def evaluate_inputs(self, values: Sequence[Any]) -> Any:
        """The expression's value given the values of :attr:`inputs`, in order."""
        if not self._built:
            self._build()
        return self._eval(*values)

    def scan(
        self, keys: Iterable[K], columns: Sequence[Mapping[K, Any]], *, aligned: bool = False
    ) -> list[K]:
        """The keys, in order, whose record matches.

        ``columns[i]`` maps a key to the value of ``inputs[i]`` for that record (a key
        absent from a column is NULL). With ``aligned`` the caller guarantees that every
        column holds every key (NULLs as None) in the order of ``keys``, so values are read
        sequentially instead of looked up. This is the SOW query hot path: one generated
        comprehension with the comparisons inlined."""
        if not self._built:
            self._build()
        if not isinstance(keys, Collection):
            keys = list(keys)
        try:
            if aligned:
                return self._scan_aligned(keys, columns)
            if self._drivers:
                driver = scan.choose(self._drivers, keys, len(self.inputs), columns)
                if driver is not None:
                    return scan.driven(driver, keys, columns)
            return self._scan(keys, columns)
        except RegexBudgetError:
            raise  # the query fails with it (a record is not to be skipped silently)
        except Exception as exc:
            # The inline code and the helpers are total; should a Python-level surprise
            # (a column that is not a Mapping, an exotic value) ever raise, say so and
            # evaluate row by row so that one record cannot fail the whole query.
            log.warning("scanning with %r failed (%r); evaluating row by row", self.text, exc)
            return self._scan_safely(keys, columns)

    def _scan_safely(self, keys: Iterable[K], columns: Sequence[Mapping[K, Any]]) -> list[K]:
        getters = [column.get for column in columns]
        matched = []
        for key in keys:
            try:
                if self._test(*[get(key) for get in getters]):
                    matched.append(key)
            except RegexBudgetError:
                raise
            except Exception:  # one record's surprise (see above) excludes only that record
                continue
        return matched


def compile_node(node: ast.Node, text: str = "") -> Expression:
    """Compile a parsed expression (filter or value); aggregate functions are rejected
    with ExpressionError."""
    return Expression(text, node, Compiler(text))


@functools.lru_cache(maxsize=1024)
def compile(text: str) -> Expression:
    """Parse and compile a filter or value expression (ParseError / ExpressionError)."""
    return compile_node(parser.parse(text), text)


def evaluate(text: str, message: Mapping[str, Any], context: MessageContext | None = None) -> Any:
    """The value of an expression for one message."""
    return compile(text)(message, context)


__all__ = ["ContextInput", "Expression", "FieldInput", "compile", "compile_node", "evaluate"]
